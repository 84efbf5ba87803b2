// The progress region in real shared memory, as the writer comm uses writes it, and the sweep of regions a
// kill -9'd ctrun left.
#include "agent/hang/region.hpp"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "common/progress.hpp"
#include "tests/agent/hang/records_fixture.hpp"

namespace ctrun::agent::hang {
namespace {
namespace fs = std::filesystem;
using test::kAllReduce;

TEST(HangRegion, ReadsWhatTheWriterCommUsesWrites) {
  Region region(::getpid(), 7, 2, ::testing::TempDir());
  progress::Row* row = progress::row_of(region.mutable_header(), 1);
  progress::Slot& slot = row->slots[3];
  slot.identity.pid.store(::getpid());
  progress::begin_write(slot.identity);
  slot.identity.group_id.store(99);
  slot.identity.global_rank.store(5);
  slot.identity.group_rank.store(1);
  slot.identity.group_size.store(2);
  progress::end_write(slot.identity);
  progress::SlotWriter w(&slot);
  w.issued(0, kAllReduce, 0, 8);
  w.running(0, kAllReduce, 0, 8);
  w.finished(true);
  w.issued(1, kAllReduce, 0, 8);
  w.running(1, kAllReduce, 0, 8);
  w.waiting(0);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  RankRecord r = region.read(1);
  EXPECT_EQ(r.global_rank, 5);
  ASSERT_EQ(r.groups.size(), 1u);
  const GroupRecord& g = r.groups[0];
  EXPECT_EQ(g.group_id, 99u);
  EXPECT_EQ(g.issued, 2u);
  EXPECT_TRUE(g.running);
  EXPECT_EQ(g.seq, 1u);
  EXPECT_EQ(g.done, 1u);
  EXPECT_EQ(g.wait_peer, 0);
  EXPECT_EQ(g.wait_step, 1u);
  EXPECT_GE(g.in_state_s, 0.015);
  EXPECT_EQ(g.p2p_pending, 0u);
  // A pending send to group rank 0, posted 20 ms ago, after 3 finished p2p ops.
  w.p2p(1, progress::P2pKind::kSend, 0, 512, progress::now_ns() - 20'000'000, 3);
  const GroupRecord p = region.read(1).groups.at(0);
  EXPECT_EQ(p.p2p_pending, 1u);
  EXPECT_FALSE(p.p2p_recv);
  EXPECT_EQ(p.p2p_peer, 0);
  EXPECT_EQ(p.p2p_bytes, 512u);
  EXPECT_GE(p.p2p_s, 0.015);
  EXPECT_EQ(p.p2p_done, 3u);
  EXPECT_TRUE(region.read(0).groups.empty());
}

TEST(HangRegion, SweepRemovesOnlyRegionsOfDeadAgents) {
  const std::string dir = ::testing::TempDir() + "/sweep";
  fs::create_directories(dir);
  const pid_t child = ::fork();
  if (child == 0) ::_exit(0);
  ::waitpid(child, nullptr, 0);  // a pid that is surely dead now
  const std::string dead = dir + "/" + progress::kRegionPrefix + std::to_string(child) + "-0";
  const std::string alive = dir + "/" + progress::kRegionPrefix + std::to_string(::getppid()) + "-3";
  const std::string other = dir + "/unrelated-" + std::to_string(child);
  for (const auto& p : {dead, alive, other}) std::ofstream(p) << "x";
  auto removed = sweep_stale_regions(dir);
  EXPECT_EQ(removed, std::vector<std::string>{dead});
  EXPECT_FALSE(fs::exists(dead));
  EXPECT_TRUE(fs::exists(alive));
  EXPECT_TRUE(fs::exists(other));
  fs::remove_all(dir);
}

}  // namespace
}  // namespace ctrun::agent::hang
