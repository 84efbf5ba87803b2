// A cross-job group: two separately launched jobs (e.g. a trainer and an inference engine, each under its own
// ctrun) form one process group through a shared ctstore, the way weight sync between them works.
//
//   ctstore --port 29600 &
//   ctrun --standalone --nproc-per-node=2 --no-python example_cross_job --store 127.0.0.1:29600 --job 0 --jobs 2
//   ctrun --standalone --nproc-per-node=2 --no-python example_cross_job --store 127.0.0.1:29600 --job 1 --jobs 2
//
// Global rank = job * LOCAL_WORLD_SIZE + RANK. Rank 0 (the trainer) broadcasts "weights"; everyone checks them.
#include <cstdlib>
#include <string>
#include <vector>

#include "example_util.hpp"
#include "store/tcp_store.hpp"

int main(int argc, char** argv) {
  std::string store_addr;
  int job = -1;
  int jobs = 2;
  std::string prefix = "cross-job";
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--store") store_addr = argv[i + 1];
    if (flag == "--job") job = std::atoi(argv[i + 1]);
    if (flag == "--jobs") jobs = std::atoi(argv[i + 1]);
    if (flag == "--prefix") prefix = argv[i + 1];
  }
  const char* rank_env = std::getenv("RANK");
  const char* world_env = std::getenv("WORLD_SIZE");
  if (store_addr.empty() || job < 0 || !rank_env || !world_env) {
    std::fprintf(stderr,
                 "usage: RANK=.. WORLD_SIZE=.. example_cross_job --store HOST:PORT --job J [--jobs N] "
                 "[--prefix P]\n");
    return 2;
  }
  const int local_rank = std::atoi(rank_env);
  const int local_world = std::atoi(world_env);
  ctrun::store::TcpStoreOptions so;
  so.host = store_addr.substr(0, store_addr.rfind(':'));
  so.port = static_cast<std::uint16_t>(std::atoi(store_addr.substr(store_addr.rfind(':') + 1).c_str()));
  so.timeout = std::chrono::seconds(60);
  auto store = std::make_shared<ctrun::store::TcpStore>(so);
  ctrun::comm::ProcessGroupOptions options;
  options.timeout = std::chrono::seconds(60);
  const int rank = job * local_world + local_rank;
  auto pg = ctrun::comm::ProcessGroup::from_store(store, prefix, rank, jobs * local_world, options);

  std::vector<float> weights(4096, 0.0f);
  if (rank == 0) {
    for (std::size_t i = 0; i < weights.size(); ++i) weights[i] = 0.5f * static_cast<float>(i);
  }
  pg->broadcast(weights, 0);
  for (std::size_t i = 0; i < weights.size(); i += 511) {
    EXAMPLE_CHECK(weights[i] == 0.5f * static_cast<float>(i), "rank %d weight %zu = %f", rank, i, weights[i]);
  }
  std::vector<std::int64_t> ranks{rank};
  pg->all_reduce(ranks);
  const std::int64_t n = pg->size();
  EXAMPLE_CHECK(ranks[0] == n * (n - 1) / 2, "rank %d: sum of ranks %lld", rank, static_cast<long long>(ranks[0]));
  std::printf("job %d rank %d (global %d of %d): weights synced, sum of ranks %lld\n", job, local_rank, rank,
              pg->size(), static_cast<long long>(ranks[0]));
  return 0;
}
