// Two-level groups (shm among the ranks of a host, tcp between hosts) against the sequential reference: every
// op x dtype x reduce op x size over uneven host layouts, with each cross-level algorithm forced and with the
// cost model's choice, and subgroups across hosts. Ranks are threads of this process over one MemoryStore; each
// thread's group is told its host through CTRUN_COMM_HOST (the process-level test with namespaced hosts is
// two_level_netns.sh).
#include <gtest/gtest.h>

#include <thread>

#include "checks.hpp"
#include "store/memory_store.hpp"

namespace ctrun::comm::testing {
namespace {

// hosts[i]: the host of rank i.
std::vector<std::string> run_on_hosts(const std::vector<int>& hosts, const std::string& algorithm,
                                      const std::function<void(int, ProcessGroup&)>& fn,
                                      std::map<std::string, std::string> settings = kSmallChunks) {
  const int n = static_cast<int>(hosts.size());
  auto store = std::make_shared<store::MemoryStore>(std::chrono::seconds(60));
  std::vector<std::string> errors(hosts.size());
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      try {
        ProcessGroupOptions options;
        options.algorithm = algorithm;
        options.timeout = std::chrono::seconds(60);
        options.settings = settings;
        options.settings["CTRUN_COMM_HOST"] = "host" + std::to_string(hosts[static_cast<std::size_t>(r)]);
        auto pg = ProcessGroup::from_store(store, "two_level", r, n, options);
        fn(r, *pg);
      } catch (const std::exception& e) {
        errors[static_cast<std::size_t>(r)] = std::string("error: ") + e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  return errors;
}

void expect_no_errors(const std::vector<std::string>& errors) {
  for (std::size_t r = 0; r < errors.size(); ++r) EXPECT_EQ(errors[r], "") << "rank " << r;
}

struct Param {
  std::vector<int> hosts;
  std::string algorithm;
  std::string name;
};

class TwoLevel : public ::testing::TestWithParam<Param> {};

TEST_P(TwoLevel, EveryOpMatchesTheSequentialReference) {
  const Param& p = GetParam();
  const int n = static_cast<int>(p.hosts.size());
  expect_no_errors(run_on_hosts(p.hosts, p.algorithm, [&](int rank, ProcessGroup& pg) {
    int seed = 0;
    check_all_reduce_and_reduce(rank, n, pg, seed);
    check_reduce_scatter(rank, n, pg, seed);
    check_data_movement(rank, n, pg, seed);
    check_point_to_point(rank, n, pg, seed);
  }));
}

std::vector<Param> params() {
  // Uneven layouts, hosts interleaved in rank order, a host of one rank beside hosts of several.
  const std::vector<std::pair<std::string, std::vector<int>>> layouts = {
      {"2x1", {0, 0, 1}},
      {"1x3", {0, 1, 1, 1}},
      {"2x2_interleaved", {0, 1, 0, 1}},
      {"3_uneven", {0, 0, 1, 2, 2, 2}},
      {"4_hosts", {0, 1, 2, 3, 3, 2, 1}},
  };
  const std::vector<std::pair<std::string, std::string>> algorithms = {
      {"model", ""},
      {"ring", "all_reduce=ring,broadcast=chain,reduce=chain"},
      {"doubling", "all_reduce=recursive_doubling,broadcast=tree,reduce=tree"},
      {"tree", "all_reduce=tree"},
      {"dbtree", "all_reduce=double_binary_tree"},
      {"halving", "all_reduce=halving_doubling"},
  };
  std::vector<Param> out;
  for (const auto& [lname, hosts] : layouts) {
    for (const auto& [aname, spec] : algorithms) out.push_back({hosts, spec, lname + "_" + aname});
  }
  return out;
}

INSTANTIATE_TEST_SUITE_P(Layouts, TwoLevel, ::testing::ValuesIn(params()),
                         [](const ::testing::TestParamInfo<Param>& info) { return info.param.name; });

// Subgroups of any shape over a two-level world: across hosts, inside one host, one rank of each host.
TEST(TwoLevelSubgroups, EveryOpMatchesTheSequentialReference) {
  const std::vector<int> hosts = {0, 0, 1, 1, 1, 2};
  const std::vector<std::vector<int>> shapes = {{0, 2, 5}, {1, 2, 3, 4}, {2, 3}, {0, 1, 3, 5}};
  expect_no_errors(run_on_hosts(hosts, "", [&](int rank, ProcessGroup& world) {
    for (const auto& members : shapes) {
      auto sub = world.new_group(members);
      if (!sub->is_member()) continue;
      int seed = 100;
      const int n = static_cast<int>(members.size());
      check_all_reduce_and_reduce(sub->rank(), n, *sub, seed);
      check_reduce_scatter(sub->rank(), n, *sub, seed);
      check_data_movement(sub->rank(), n, *sub, seed);
    }
    world.barrier();
    (void)rank;
  }));
}

}  // namespace
}  // namespace ctrun::comm::testing
