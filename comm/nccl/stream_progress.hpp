#pragma once
// The nccl backend's progress record (common/progress.hpp), as the cpu backend writes it, so that the agent's hang,
// straggler and `--hang-timeout auto` rules see GPU jobs. A group's ops run in issue order on one stream, so:
//   - issue part: the caller's thread numbers each collective under the backend's issue lock (issued());
//   - run part: the watchdog thread, the one writer of it, follows the head of the stream's queue: the oldest op
//     not finished is "running" (its kernels run, or wait for the caller's stream before them) since the watchdog
//     first saw it there (at_head(), within its 1 ms poll), and "done" once its completion event fired (done()).
// Kept apart from CUDA (plain numbers in, SlotWriter calls out) so a test drives it without a device; what it
// cannot see: which peer a kernel waits for (the run part's wait_peer stays -1).

#include <cstdint>
#include <limits>

#include "common/progress.hpp"

namespace ctrun::comm::nccl {

struct RecordedOp {
  std::uint64_t seq = 0;
  std::uint32_t op = 0;     // comm's OpKind
  std::uint32_t dtype = 0;  // comm's DataType
  std::uint64_t bytes = 0;
};

class StreamProgress {
 public:
  StreamProgress() = default;
  explicit StreamProgress(progress::SlotWriter writer) : writer_(writer) {}
  bool enabled() const { return writer_.enabled(); }
  progress::SlotWriter& writer() { return writer_; }

  // The caller's thread, under the issue lock: the group's next collective; returns it numbered.
  RecordedOp issued(std::uint32_t op, std::uint32_t dtype, std::uint64_t bytes) {
    RecordedOp r{next_++, op, dtype, bytes};
    writer_.issued(r.seq, op, dtype, bytes);
    return r;
  }

  // The watchdog thread: `r` is the oldest op of the group not finished.
  void at_head(const RecordedOp& r) {
    if (head_ == r.seq) return;
    head_ = r.seq;
    writer_.running(r.seq, r.op, r.dtype, r.bytes);
  }

  // The watchdog thread: `r` finished (ok or failed). An op that finished before the watchdog saw it at the head
  // is run and done at once.
  void done(const RecordedOp& r, bool ok) {
    at_head(r);
    writer_.finished(ok);
    head_ = kNone;
  }

 private:
  static constexpr std::uint64_t kNone = std::numeric_limits<std::uint64_t>::max();
  progress::SlotWriter writer_;
  std::uint64_t next_ = 0;      // the caller's side
  std::uint64_t head_ = kNone;  // the watchdog's side: the op marked running
};

}  // namespace ctrun::comm::nccl
