#pragma once
// Work: the handle of one asynchronous op (torch's c10d::Work). Every op of ProcessGroup has an async form that
// returns a WorkPtr; the blocking form is async + wait().

#include <atomic>
#include <condition_variable>
#include <exception>
#include <memory>
#include <mutex>

#include "comm/types.hpp"

namespace ctrun::comm {

class Work {
 public:
  virtual ~Work() = default;

  // True once the op finished, successfully or not. Never blocks.
  virtual bool is_completed() = 0;

  // Blocks until the op finished, then rethrows its error if it failed. `timeout` zero means the op's own
  // timeout (the group's); on expiry throws TimeoutError (the op itself may still fail or finish later).
  // Device backends (nccl) make the caller's current stream wait instead of blocking the host.
  virtual void wait(Duration timeout = Duration::zero()) = 0;

  // Like wait(), but device backends also block the host until the device work is done.
  virtual void synchronize() { wait(); }

  // The op's error once it failed; nullptr while running or after success.
  virtual std::exception_ptr exception() = 0;

  bool is_success() { return is_completed() && !exception(); }

  // A receive's sender once it completed (the rank a receive from kAnySource got its message from); -1 before
  // that, and for every other op.
  int source_rank() const { return source_rank_.load(std::memory_order_acquire); }
  void set_source_rank(int rank) { source_rank_.store(rank, std::memory_order_release); }

 private:
  std::atomic<int> source_rank_{-1};
};

using WorkPtr = std::shared_ptr<Work>;

// A Work finished by whoever runs the op (a backend thread) through complete(). Thread-safe.
class CompletionWork : public Work {
 public:
  explicit CompletionWork(Duration default_timeout) : default_timeout_(default_timeout) {}

  bool is_completed() override;
  void wait(Duration timeout = Duration::zero()) override;
  std::exception_ptr exception() override;

  // Marks the op done (error == nullptr: success). Later calls are ignored.
  void complete(std::exception_ptr error = nullptr);

 private:
  Duration default_timeout_;
  std::mutex mutex_;
  std::condition_variable done_cv_;
  bool done_ = false;
  std::exception_ptr error_;
};

// A Work that is already finished (ops with nothing to do, e.g. world size 1).
WorkPtr completed_work(std::exception_ptr error = nullptr);

}  // namespace ctrun::comm
