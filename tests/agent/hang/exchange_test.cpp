// The hang exchange through a round's store (agent/hang/exchange.hpp): group rank 0 reads only the summaries that
// changed, in a bounded number of requests whatever the number of nodes; nothing that changed is lost to a race;
// the others read its verdicts. And when a node publishes (summary.hpp: the pacer, a stalled node).
#include "agent/hang/exchange.hpp"

#include <gtest/gtest.h>

#include <memory>

#include "agent/hang/summary.hpp"
#include "agent/hang/watch.hpp"
#include "store/counting_store.hpp"
#include "store/memory_store.hpp"
#include "tests/support/forwarding_store.hpp"

namespace ctrun::agent::hang {
namespace {

struct Counted {
  explicit Counted(std::shared_ptr<store::Store> inner)
      : traffic(std::make_shared<store::StoreTraffic>()), store(std::move(inner), traffic) {}
  std::uint64_t ops() const { return traffic->ops.load(); }
  std::shared_ptr<store::StoreTraffic> traffic;
  store::CountingStore store;
};

TEST(HangExchange, GroupRankZeroReadsOnlyWhatChangedInBoundedRequests) {
  auto shared = std::make_shared<store::MemoryStore>();
  constexpr int kNodes = 50;
  for (int n = 1; n < kNodes; ++n) {
    ExchangeStep s;
    s.summary = "summary of " + std::to_string(n);
    run_exchange(*shared, n, kNodes, s);
  }
  Counted zero(shared);
  ExchangeStep read;
  read.aggregate = true;
  read.verdicts = "";
  const auto first = run_exchange(zero.store, 0, kNodes, read);
  EXPECT_EQ(first.summaries.size(), static_cast<std::size_t>(kNodes - 1));
  EXPECT_EQ(first.summaries.at(7), "summary of 7");
  EXPECT_LE(zero.ops(), 4u);  // verdicts, the list, taking it, every listed summary

  // Nothing changed: two requests, nothing read.
  const auto before = zero.ops();
  EXPECT_TRUE(run_exchange(zero.store, 0, kNodes, read).summaries.empty());
  EXPECT_LE(zero.ops() - before, 2u);

  // Two nodes change: only theirs are read.
  for (int n : {3, 41}) {
    ExchangeStep s;
    s.summary = "again " + std::to_string(n);
    run_exchange(*shared, n, kNodes, s);
  }
  const auto second = run_exchange(zero.store, 0, kNodes, read);
  EXPECT_EQ(second.summaries, (std::map<int, std::string>{{3, "again 3"}, {41, "again 41"}}));
}

// A node that appends between group rank 0's read of the list and its compare-and-set: the list is not taken, and
// the next read has both.
TEST(HangExchange, AnAppendDuringTheTakeIsReadNextTime) {
  class AppendOnFirstCas : public test::ForwardingStore {
   public:
    using ForwardingStore::ForwardingStore;
    std::string compare_set(const std::string& key, std::string_view expected, std::string_view desired) override {
      if (key.find("changed") != std::string::npos && desired.empty() && !done_) {
        done_ = true;
        inner().set("progress/node/9", "late 9");
        inner().append(key, "9,");
      }
      return ForwardingStore::compare_set(key, expected, desired);
    }
    bool done_ = false;
  };
  AppendOnFirstCas s(std::make_shared<store::MemoryStore>());
  ExchangeStep w;
  w.summary = "early 4";
  run_exchange(s, 4, 10, w);
  ExchangeStep read;
  read.aggregate = true;
  EXPECT_TRUE(run_exchange(s, 0, 10, read).summaries.empty());  // raced: not taken
  EXPECT_EQ(run_exchange(s, 0, 10, read).summaries, (std::map<int, std::string>{{4, "early 4"}, {9, "late 9"}}));
}

TEST(HangExchange, OtherNodesReadTheVerdicts) {
  store::MemoryStore s;
  ExchangeStep ask;
  ask.read_verdicts = true;
  EXPECT_EQ(run_exchange(s, 3, 4, ask).verdicts, "");  // none published yet
  ExchangeStep publish;
  publish.aggregate = true;
  publish.verdicts = "5 \nrank 5 has not entered all_reduce #12\n";
  run_exchange(s, 0, 4, publish);
  EXPECT_EQ(run_exchange(s, 3, 4, ask).verdicts, publish.verdicts);
  EXPECT_EQ(changed_ranks("3,0,7,x,,3,99,", 0, 10), (std::vector<int>{3, 7}));
}

GroupRecord group(bool running, double in_state_s, std::uint64_t issued = 5) {
  GroupRecord g;
  g.issued = issued;
  g.running = running;
  g.in_state_s = in_state_s;
  return g;
}

TEST(HangExchange, ARankStallsWhenNoneOfItsGroupsMoved) {
  RankRecord busy;
  busy.groups = {group(true, 500), group(false, 0.2)};  // one group hung, the other just finished an op
  EXPECT_FALSE(stalled({busy}, 100));
  RankRecord stuck;
  stuck.groups = {group(true, 500), group(false, 800)};
  EXPECT_TRUE(stalled({busy, stuck}, 100));
  EXPECT_FALSE(stalled({stuck}, 1000));
  RankRecord unused;
  unused.groups = {group(false, 900, /*issued=*/0)};  // never used: says nothing
  EXPECT_FALSE(stalled({unused}, 100));
  EXPECT_FALSE(stalled({RankRecord{}}, 0));  // no records
}

TEST(HangExchange, AStalledNodePublishesWithinSecondsAtAnySize) {
  PublishPacer p;
  EXPECT_TRUE(p.due(0, 16384, "a"));
  p.published(0, "a");
  EXPECT_FALSE(p.due(30, 16384, "b"));  // running: 16,384 nodes write at most 20 a second in all
  EXPECT_TRUE(p.due(30, 16384, "b", /*stalled=*/true));
  EXPECT_FALSE(p.due(30, 16384, "a", /*stalled=*/true));  // unchanged (and no heartbeat due)
}

// What a tick exchanges (next_step, HangSupervisor's and scale_bench's): group rank 0 reads and publishes its verdicts
// every kReadEvery s; another node reads the verdicts only when they can fail ranks (a hang timeout), with each
// summary it writes; a node's first summary is due at once, then only when the pacer says so.
TEST(HangExchange, EachTickExchangesWhatIsDueAndGroupRankZeroReadsEveryTwoSeconds) {
  WatchConfig c;
  c.host = "vm";
  c.agent_pid = 1000007;
  c.shm_dir = ::testing::TempDir();
  HangWatch zero(c), other(c);
  double zero_read = -1e9, other_read = -1e9;
  const auto first = next_step(zero, 10, 0, 64, true, zero_read);
  EXPECT_TRUE(first.aggregate);
  EXPECT_FALSE(first.summary.empty()) << "a node's first summary is due at once";
  EXPECT_FALSE(first.read_verdicts) << "group rank 0 writes the verdicts, it does not read them";
  EXPECT_EQ(zero_read, 10);
  EXPECT_FALSE(next_step(zero, 11, 0, 64, true, zero_read).any()) << "nothing due 1 s later";
  EXPECT_TRUE(next_step(zero, 10 + kReadEvery, 0, 64, true, zero_read).aggregate);

  const auto without_timeout = next_step(other, 10, 5, 64, false, other_read);
  EXPECT_FALSE(without_timeout.summary.empty());
  EXPECT_FALSE(without_timeout.aggregate);
  EXPECT_FALSE(without_timeout.read_verdicts) << "verdicts fail nobody without a hang timeout: not read";
  HangWatch third(c);
  const auto with_timeout = next_step(third, 10, 5, 64, true, other_read);
  EXPECT_TRUE(with_timeout.read_verdicts) << "read with the summary it writes";
  EXPECT_EQ(other_read, 10);
  EXPECT_FALSE(next_step(third, 12, 5, 64, true, other_read).any()) << "not stalled, nothing changed: nothing";

  // What a step read goes into the watch: the verdicts naming no local rank change nothing, a summary is held.
  ExchangeResult got;
  NodeSummary remote;
  remote.counter = 1;
  remote.host = "other";
  RankRecord r;
  r.global_rank = 9;
  remote.ranks.push_back(r);
  got.summaries[3] = encode(remote);
  take(zero, got, 13);
  zero.tick(13);
  bool seen = false;
  for (const auto& rank : zero.ranks()) seen |= rank.global_rank == 9;
  EXPECT_TRUE(seen) << "node 3's rank 9 is in group rank 0's view after take()";
}

}  // namespace
}  // namespace ctrun::agent::hang
