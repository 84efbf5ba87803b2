// One rank of two_level_netns.sh: joins the group through the ctstore at STORE (host:port) as RANK of
// WORLD_SIZE and runs every collective check (checks.hpp) on the world and on subgroups across hosts
// ("check"), or loops over all_reduce while rank KILL_RANK kills itself mid-op ("kill": every other rank must
// fail within the group's timeout, 40 s from the first of its ops, with an error naming that rank). Prints one
// line; exit 0 on success.
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "checks.hpp"
#include "store/tcp_store.hpp"

using namespace ctrun::comm;

int main(int argc, char** argv) {
  const char* store_env = std::getenv("STORE");
  const char* rank_env = std::getenv("RANK");
  const char* world_env = std::getenv("WORLD_SIZE");
  const std::string mode = argc > 1 ? argv[1] : "";
  if (!store_env || !rank_env || !world_env || (mode != "check" && mode != "kill")) {
    std::fprintf(stderr, "usage: STORE=host:port RANK=.. WORLD_SIZE=.. [KILL_RANK=..] two_level_worker check|kill\n");
    return 2;
  }
  const std::string addr = store_env;
  const int rank = std::atoi(rank_env);
  const int world = std::atoi(world_env);
  ctrun::store::TcpStoreOptions so;
  so.host = addr.substr(0, addr.rfind(':'));
  so.port = static_cast<std::uint16_t>(std::atoi(addr.substr(addr.rfind(':') + 1).c_str()));
  so.timeout = std::chrono::seconds(60);
  try {
    auto store = std::make_shared<ctrun::store::TcpStore>(so);
    ProcessGroupOptions options;
    options.timeout = std::chrono::seconds(mode == "kill" ? 40 : 60);
    options.settings = testing::kSmallChunks;
    auto pg = ProcessGroup::from_store(store, mode, rank, world, options);
    if (mode == "check") {
      int seed = 0;
      testing::check_all_reduce_and_reduce(rank, world, *pg, seed);
      testing::check_reduce_scatter(rank, world, *pg, seed);
      testing::check_data_movement(rank, world, *pg, seed);
      testing::check_point_to_point(rank, world, *pg, seed);
      std::vector<int> odd;
      for (int r = 1; r < world; r += 2) odd.push_back(r);
      auto sub = pg->new_group(odd);
      if (sub->is_member()) {
        testing::check_all_reduce_and_reduce(sub->rank(), sub->size(), *sub, seed);
        testing::check_data_movement(sub->rank(), sub->size(), *sub, seed);
      }
      pg->barrier();
      std::printf("rank %d: every check passed\n", rank);
      return 0;
    }
    const int victim = std::atoi(std::getenv("KILL_RANK") ? std::getenv("KILL_RANK") : "1");
    std::vector<float> v(1 << 18, 1.0f);
    const auto start = std::chrono::steady_clock::now();
    try {
      for (int i = 0; i < 1000000; ++i) {
        if (rank == victim && i == 10) kill(getpid(), SIGKILL);
        pg->all_reduce(v);
      }
    } catch (const CommError& e) {
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      const std::string what = e.what();
      const bool named = what.find("rank " + std::to_string(victim)) != std::string::npos;
      std::printf("rank %d raised after %.2f s (%s the dead rank): %s\n", rank, s, named ? "naming" : "NOT naming",
                  what.c_str());
      // Within the group's timeout (the op the victim died in, and the ten before it, included): 22-26 s were seen
      // with two more copies of the suite running beside.
      return s < 40 && named ? 0 : 1;
    }
    std::printf("rank %d: the collective never failed\n", rank);
    return 1;
  } catch (const std::exception& e) {
    std::printf("rank %d failed: %s\n", rank, e.what());
    return 1;
  }
}
