// How a group finds which of its ranks share a host (comm/cpu/transports.cpp): from the agent's variables (one
// record per agent in the store) when the group is the world the agent launched, else by every rank publishing
// its own identity. Ranks are threads over one MemoryStore, each with the BackendContext its group would get.
#include <gtest/gtest.h>

#include <algorithm>
#include <mutex>
#include <thread>

#include "comm/algorithms/two_level.hpp"
#include "comm/cpu/transports.hpp"
#include "store/memory_store.hpp"

namespace ctrun::comm::testing {
namespace {

// Agents as (first rank, ranks, host identity); identity is what CTRUN_COMM_HOST says on that agent's ranks.
struct Agent {
  int first;
  int count;
  std::string host;
};

struct Result {
  std::vector<std::vector<std::string>> identities;  // per rank
  std::vector<std::string> errors;                   // per rank, empty when none
  std::vector<std::string> keys;                     // what the exchange left in the store
};

// with_env: set the agent's variables; rank_offset: claim RANK = rank + offset (a group the env does not describe);
// virtual_local_rank: LOCAL_RANK 0 on every rank (the agent's --virtual-local-rank).
Result run(const std::vector<Agent>& agents, bool with_env, int rank_offset = 0, bool virtual_local_rank = false) {
  int size = 0;
  for (const auto& a : agents) size = std::max(size, a.first + a.count);
  auto store = std::make_shared<store::MemoryStore>(std::chrono::seconds(10));
  Result res;
  res.identities.resize(static_cast<std::size_t>(size));
  res.errors.resize(static_cast<std::size_t>(size));
  std::vector<std::thread> threads;
  for (std::size_t g = 0; g < agents.size(); ++g) {
    for (int l = 0; l < agents[g].count; ++l) {
      const int rank = agents[g].first + l;
      BackendContext ctx;
      ctx.store = store;
      ctx.rank = rank;
      ctx.size = size;
      ctx.options.timeout = std::chrono::seconds(10);
      ctx.config.host = agents[g].host;
      if (with_env) {
        auto& w = ctx.config.worker;
        w.rank = std::to_string(rank + rank_offset);
        w.world_size = std::to_string(size);
        w.local_rank = virtual_local_rank ? 0 : l;
        w.local_world_size = agents[g].count;
        w.group_rank = static_cast<int>(g);
        w.group_world_size = static_cast<int>(agents.size());
      }
      threads.emplace_back([&res, rank, ctx] {
        try {
          res.identities[static_cast<std::size_t>(rank)] = cpu::exchange_host_identities(ctx);
        } catch (const std::exception& e) {
          res.errors[static_cast<std::size_t>(rank)] = e.what();
        }
      });
    }
  }
  for (auto& t : threads) t.join();
  res.keys = store->list_keys();
  std::sort(res.keys.begin(), res.keys.end());
  return res;
}

const std::vector<std::string> kWant = {"a", "a", "b", "a", "a", "a"};

// Three agents of uneven sizes, two of them on one host: one record per agent, the same identities (and so the
// same layout) the per-rank exchange finds.
TEST(HostIdentities, FromTheAgentsVariablesOneRecordPerAgent) {
  const std::vector<Agent> agents = {{0, 2, "a"}, {2, 1, "b"}, {3, 3, "a"}};
  const Result r = run(agents, true);
  for (std::size_t rank = 0; rank < kWant.size(); ++rank) {
    EXPECT_EQ(r.errors[rank], "") << rank;
    EXPECT_EQ(r.identities[rank], kWant) << rank;
  }
  EXPECT_EQ(r.keys, (std::vector<std::string>{"host/agent/0", "host/agent/1", "host/agent/2"}));
  const auto layout = algorithms::HostLayout::from_identities(r.identities[0]);
  EXPECT_EQ(layout.hosts, (std::vector<std::vector<int>>{{0, 1, 3, 4, 5}, {2}}));
}

TEST(HostIdentities, WithoutTheAgentsVariablesEveryRankPublishesItsOwn) {
  const Result r = run({{0, 2, "a"}, {2, 1, "b"}, {3, 3, "a"}}, false);
  for (std::size_t rank = 0; rank < kWant.size(); ++rank) EXPECT_EQ(r.identities[rank], kWant) << rank;
  EXPECT_EQ(r.keys.size(), kWant.size());
  EXPECT_EQ(r.keys.front(), "host/0");
}

// A group whose ranks are not the agent's RANKs (a subgroup, a group a user built over part of the world): the
// variables say nothing about it, so it exchanges per rank.
TEST(HostIdentities, AGroupTheVariablesDoNotDescribeExchangesPerRank) {
  const Result r = run({{0, 2, "a"}, {2, 1, "b"}, {3, 3, "a"}}, true, 1);
  for (std::size_t rank = 0; rank < kWant.size(); ++rank) EXPECT_EQ(r.identities[rank], kWant) << rank;
  EXPECT_EQ(r.keys.size(), kWant.size());
}

// --virtual-local-rank: every worker says LOCAL_RANK 0, so any rank of an agent may publish its record. Whichever
// won, every rank ends with the right identities: from the records when they tile the world (only the true
// ranges can), else all ranks alike fall back to the per-rank exchange. Repeated: the winners vary by schedule.
TEST(HostIdentities, VirtualLocalRanksStillPlaceEveryRank) {
  for (int round = 0; round < 20; ++round) {
    const Result r = run({{0, 2, "a"}, {2, 1, "b"}, {3, 3, "a"}}, true, 0, true);
    for (std::size_t rank = 0; rank < kWant.size(); ++rank) {
      EXPECT_EQ(r.errors[rank], "") << rank;
      EXPECT_EQ(r.identities[rank], kWant) << rank << " round " << round;
    }
  }
}

}  // namespace
}  // namespace ctrun::comm::testing
