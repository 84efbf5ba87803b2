#pragma once
// The Work of one nccl op: a CUDA event recorded on the group's stream after the op's kernels.
//   wait()          the caller's current stream waits for the event (no host sync), as torch's NCCL Work;
//                   ops marked host_sync (barrier) and waits with an explicit timeout block the host instead.
//   synchronize()   blocks the host until the op finished or failed (the watchdog fails it at its deadline).
//   is_completed()  polls the event.
// The watchdog fails the Work (fail()) when the op outlives its deadline or the communicator breaks.

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "comm/nccl/cuda_check.hpp"
#include "comm/nccl/stream_progress.hpp"
#include "comm/work.hpp"

namespace ctrun::comm::nccl {

using Clock = std::chrono::steady_clock;

// Reuses completion events: creating one per op would cost microseconds on the small-message path.
class EventPool {
 public:
  explicit EventPool(int device) : device_(device) {}
  ~EventPool();
  EventPool(const EventPool&) = delete;
  EventPool& operator=(const EventPool&) = delete;

  cudaEvent_t acquire();
  void release(cudaEvent_t event);
  int device() const { return device_; }

 private:
  int device_;
  std::mutex mutex_;
  std::vector<cudaEvent_t> free_;
};

class NcclWork final : public Work {
 public:
  NcclWork(std::shared_ptr<EventPool> pool, cudaEvent_t done, std::string what, Clock::time_point deadline,
           bool host_sync);
  ~NcclWork() override;

  bool is_completed() override;
  void wait(Duration timeout = Duration::zero()) override;
  void synchronize() override;
  std::exception_ptr exception() override;

  // Watchdog side. poll(): true once finished (success or failure). fail(): first outcome wins.
  bool poll();
  void fail(std::exception_ptr error);
  Clock::time_point deadline() const { return deadline_; }
  const std::string& what() const { return what_; }
  bool failed() const { return state_.load() == kFailed; }
  // A numbered collective's progress record (stream_progress.hpp); none for point-to-point ops.
  std::optional<RecordedOp> record;

 private:
  enum State : int { kPending, kDone, kFailed };
  void host_wait(Clock::time_point until);
  void rethrow_if_failed();

  std::shared_ptr<EventPool> pool_;
  cudaEvent_t done_;
  std::string what_;
  Clock::time_point deadline_;
  bool host_sync_;
  std::atomic<int> state_{kPending};
  std::mutex error_mutex_;
  std::exception_ptr error_;
};

}  // namespace ctrun::comm::nccl
