// The nccl backend's record writing (comm/nccl/stream_progress.hpp), driven without a GPU: the caller numbers ops
// as it issues them, the watchdog's view of the stream's head and of completion events makes the run part.
#include "comm/nccl/stream_progress.hpp"

#include <gtest/gtest.h>

#include <memory>
#include <thread>

namespace ctrun::comm::nccl {
namespace {

constexpr std::uint32_t kAllReduce = 2, kBroadcast = 1, kFloat32 = 0;

bool running(const progress::Slot& s) {
  return s.run.state.load() == static_cast<std::uint32_t>(progress::RunState::kRunning);
}

TEST(NcclStreamProgress, IssuedInOrderRunAtTheHeadDoneOnItsEvent) {
  auto slot = std::make_unique<progress::Slot>();
  StreamProgress p{progress::SlotWriter(slot.get())};
  ASSERT_TRUE(p.enabled());
  const RecordedOp a = p.issued(kAllReduce, kFloat32, 4096);
  const RecordedOp b = p.issued(kBroadcast, kFloat32, 64);
  EXPECT_EQ(a.seq, 0u);
  EXPECT_EQ(b.seq, 1u);
  EXPECT_EQ(slot->issue.issued.load(), 2u) << "two issued: #1 is the last";
  EXPECT_EQ(slot->issue.op.load(), kBroadcast);
  EXPECT_FALSE(running(*slot)) << "nothing seen running yet";

  p.at_head(a);
  EXPECT_TRUE(running(*slot));
  EXPECT_EQ(slot->run.seq.load(), 0u);
  EXPECT_EQ(slot->run.op.load(), kAllReduce);
  EXPECT_EQ(slot->run.bytes.load(), 4096u);
  EXPECT_EQ(slot->run.wait_peer.load(), -1) << "a kernel's peer is not known";
  const auto since = slot->run.since_ns.load();
  std::this_thread::sleep_for(std::chrono::milliseconds(2));
  p.at_head(a);  // the next poll: still the same op, still since the first look
  EXPECT_EQ(slot->run.since_ns.load(), since);

  p.done(a, true);
  EXPECT_FALSE(running(*slot));
  EXPECT_EQ(slot->run.done.load(), 1u);
  EXPECT_GE(slot->run.busy_ns.load(), 2'000'000u);

  // #1 finished before the watchdog saw it at the head: run and done at once, counted once.
  p.done(b, false);
  EXPECT_EQ(slot->run.seq.load(), 1u);
  EXPECT_EQ(slot->run.done.load(), 2u);
  EXPECT_EQ(slot->run.failed.load(), 1u);
  EXPECT_FALSE(running(*slot));
}

TEST(NcclStreamProgress, RecordsOffCostNothingAndStillNumber) {
  StreamProgress p;
  EXPECT_FALSE(p.enabled());
  EXPECT_EQ(p.issued(kAllReduce, kFloat32, 4).seq, 0u);
  const RecordedOp b = p.issued(kAllReduce, kFloat32, 4);
  EXPECT_EQ(b.seq, 1u);
  p.at_head(b);
  p.done(b, true);  // no slot: nothing written, nothing thrown
}

}  // namespace
}  // namespace ctrun::comm::nccl
