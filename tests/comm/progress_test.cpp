// comm's progress records (common/progress.hpp) as the agent reads them: per group and rank, the collective's
// number, op, bytes, state and the peer it waits for, on both transports, with records off by the setting.
// Ranks are threads of this process sharing LOCAL_RANK 0's row (each group of each thread claims its own slot).
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <thread>

#include "comm/algorithms/table.hpp"
#include "common/progress.hpp"
#include "common/worker_env.hpp"
#include "harness.hpp"

namespace ctrun::comm {
namespace {

using std::chrono::milliseconds;

// The region every group of this process records into: made before any group exists (comm maps it once).
progress::RegionHeader* region() {
  static progress::RegionHeader* h = [] {
    const std::string path = ::testing::TempDir() + "/comm_progress_test_" + std::to_string(::getpid());
    auto* r = progress::create_region(path, 1, ::getpid(), 0);
    ::setenv(worker_env::kProgressFile, path.c_str(), 1);
    ::setenv(worker_env::kLocalRank, "0", 1);
    ::setenv(worker_env::kRank, "0", 1);
    std::atexit([] { ::unlink((::testing::TempDir() + "/comm_progress_test_" + std::to_string(::getpid())).c_str()); });
    return r;
  }();
  return h;
}

struct Seen {
  std::uint64_t group_id = 0, issued = 0, seq = 0, done = 0, bytes = 0, busy_ns = 0;
  int group_rank = -1, wait_peer = -1;
  bool running = false;
  std::uint32_t op = 0;
  std::uint32_t p2p_pending = 0, p2p_kind = 0;
  int p2p_peer = -1;
  std::uint64_t p2p_bytes = 0, p2p_completed = 0;
  std::int64_t p2p_since_ns = 0;
};

// The slots in use, as the agent would read them.
std::vector<Seen> slots() {
  std::vector<Seen> out;
  const progress::Row* row = progress::row_of(region(), 0);
  for (const auto& s : row->slots) {
    if (s.identity.group_id.load() == 0) continue;
    Seen v;
    v.group_id = s.identity.group_id.load();
    v.group_rank = s.identity.group_rank.load();
    v.issued = s.issue.issued.load();
    v.running = s.run.state.load() == static_cast<std::uint32_t>(progress::RunState::kRunning);
    v.seq = s.run.seq.load();
    v.done = s.run.done.load();
    v.bytes = s.run.bytes.load();
    v.busy_ns = s.run.busy_ns.load();
    v.wait_peer = s.run.wait_peer.load();
    v.op = s.run.op.load();
    v.p2p_pending = s.p2p.pending.load();
    v.p2p_kind = s.p2p.kind.load();
    v.p2p_peer = s.p2p.peer.load();
    v.p2p_bytes = s.p2p.bytes.load();
    v.p2p_completed = s.p2p.completed.load();
    v.p2p_since_ns = s.p2p.since_ns.load();
    out.push_back(v);
  }
  return out;
}

class ProgressRecords : public ::testing::TestWithParam<std::string> {};

TEST_P(ProgressRecords, NameTheOpEveryRankIsInAndWhomItWaitsFor) {
  ASSERT_NE(region(), nullptr);
  ProcessGroupOptions options;
  options.transport = GetParam();
  options.timeout = std::chrono::seconds(20);
  std::atomic<bool> rank1_go{false};
  std::atomic<bool> checked{false};
  testing::run_ranks(2, options, [&](int rank, ProcessGroup& pg) {
    std::vector<float> v(16, 1.0f);
    for (int i = 0; i < 3; ++i) pg.all_reduce(Buffer(v));
    if (rank == 0) {
      // Rank 1 is late into all_reduce #3: rank 0's record says it waits inside #3, for rank 1.
      auto work = pg.all_reduce_async(Buffer(v));
      std::this_thread::sleep_for(milliseconds(300));
      std::vector<Seen> now = slots();
      ASSERT_EQ(now.size(), 2u);
      const Seen& mine = now[0].group_rank == 0 ? now[0] : now[1];
      const Seen& late = now[0].group_rank == 0 ? now[1] : now[0];
      EXPECT_EQ(mine.group_id, late.group_id) << "the members agree on the group's id";
      EXPECT_TRUE(mine.running);
      EXPECT_EQ(mine.seq, 3u);
      EXPECT_EQ(mine.issued, 4u);
      EXPECT_EQ(mine.op, 2u) << "all_reduce";
      EXPECT_EQ(mine.bytes, 64u);
      EXPECT_EQ(mine.wait_peer, 1);
      EXPECT_FALSE(late.running);
      EXPECT_EQ(late.issued, 3u) << "rank 1 has not entered #3";
      EXPECT_EQ(late.done, 3u);
      EXPECT_GT(late.busy_ns, 0u);
      checked = true;
      rank1_go = true;
      work->wait();
    } else {
      while (!rank1_go) std::this_thread::sleep_for(milliseconds(5));
      pg.all_reduce(Buffer(v));
    }
    pg.barrier();
  });
  EXPECT_TRUE(checked);
  EXPECT_TRUE(slots().empty()) << "destroyed groups free their slots";
}

// Point-to-point ops: the worker thread records how many are pending and the oldest (recv or send, peer, bytes,
// since when), and how many finished; they are not numbered collectives.
TEST_P(ProgressRecords, ShowThePendingPointToPointOp) {
  ASSERT_NE(region(), nullptr);
  ProcessGroupOptions options;
  options.transport = GetParam();
  options.timeout = std::chrono::seconds(20);
  std::atomic<bool> rank0_go{false};
  std::atomic<bool> checked{false};
  testing::run_ranks(2, options, [&](int rank, ProcessGroup& pg) {
    std::vector<float> v(32, 1.0f);
    pg.barrier();
    if (rank == 1) {
      // Rank 1 waits in a recv from rank 0, which sends late.
      const std::int64_t before = progress::now_ns();
      auto work = pg.irecv(Buffer(v), 0, 7);
      std::this_thread::sleep_for(milliseconds(300));
      std::vector<Seen> now = slots();
      ASSERT_EQ(now.size(), 2u);
      const Seen& mine = now[0].group_rank == 1 ? now[0] : now[1];
      const Seen& sender = now[0].group_rank == 1 ? now[1] : now[0];
      EXPECT_EQ(mine.p2p_pending, 1u);
      EXPECT_EQ(mine.p2p_kind, static_cast<std::uint32_t>(progress::P2pKind::kRecv));
      EXPECT_EQ(mine.p2p_peer, 0);
      EXPECT_EQ(mine.p2p_bytes, 128u);
      EXPECT_GE(mine.p2p_since_ns, before);
      EXPECT_FALSE(mine.running) << "not a collective";
      EXPECT_EQ(mine.issued, 1u) << "the barrier only: p2p ops are not numbered";
      EXPECT_EQ(sender.p2p_pending, 0u);
      checked = true;
      rank0_go = true;
      work->wait();
      // The worker writes the record on its next turn after completing the recv: give it a moment.
      auto mine_now = [] {
        std::vector<Seen> s = slots();
        return s.size() == 2 ? (s[0].group_rank == 1 ? s[0] : s[1]) : Seen{};
      };
      Seen after = mine_now();
      for (int i = 0; i < 200 && after.p2p_pending != 0; ++i) {
        std::this_thread::sleep_for(milliseconds(10));
        after = mine_now();
      }
      EXPECT_EQ(after.p2p_pending, 0u) << "the record says done once the recv finished";
      EXPECT_EQ(after.p2p_completed, 1u);
    } else {
      while (!rank0_go) std::this_thread::sleep_for(milliseconds(5));
      pg.send(Buffer(v), 1, 7);
    }
    pg.barrier();
  });
  EXPECT_TRUE(checked);
}

INSTANTIATE_TEST_SUITE_P(Transports, ProgressRecords, ::testing::Values("tcp", "shm"));

TEST(ProgressRecordsOff, TheSettingTurnsThemOff) {
  ASSERT_NE(region(), nullptr);
  ProcessGroupOptions options;
  options.settings["CTRUN_COMM_PROGRESS"] = "0";
  testing::run_ranks(2, options, [&](int, ProcessGroup& pg) {
    std::vector<float> v(4, 1.0f);
    pg.all_reduce(Buffer(v));
    EXPECT_TRUE(slots().empty());
    pg.barrier();
  });
}

// The agent prints comm's op and dtype numbers with progress.hpp's names: they must agree with comm's.
TEST(ProgressRecordsNames, AgreeWithCommsTables) {
  ASSERT_EQ(std::size(progress::kOpNames), static_cast<std::size_t>(algorithms::kNumOpKinds));
  for (int i = 0; i < algorithms::kNumOpKinds; ++i) {
    EXPECT_EQ(progress::op_name(static_cast<std::uint32_t>(i)),
              algorithms::op_name(static_cast<algorithms::OpKind>(i)));
  }
  for (int i = 0; i < kNumDataTypes; ++i) {
    EXPECT_EQ(progress::dtype_name(static_cast<std::uint32_t>(i)), to_string(static_cast<DataType>(i)));
  }
}

}  // namespace
}  // namespace ctrun::comm
