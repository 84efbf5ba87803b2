#include "comm/work.hpp"

#include <string>

namespace ctrun::comm {

bool CompletionWork::is_completed() {
  std::lock_guard lock(mutex_);
  return done_;
}

void CompletionWork::wait(Duration timeout) {
  if (timeout == Duration::zero()) timeout = default_timeout_;
  std::unique_lock lock(mutex_);
  // The backend enforces the op's own timeout; this one only bounds the caller's wait (plus slack so that the
  // backend's more precise error wins when both expire together).
  if (!done_cv_.wait_for(lock, timeout + std::chrono::milliseconds(200), [this] { return done_; })) {
    throw TimeoutError("Work::wait timed out after " + std::to_string(timeout.count()) +
                       " ms; the op is still running (a peer may be stalled or calling a different op)");
  }
  if (error_) std::rethrow_exception(error_);
}

std::exception_ptr CompletionWork::exception() {
  std::lock_guard lock(mutex_);
  return error_;
}

void CompletionWork::complete(std::exception_ptr error) {
  {
    std::lock_guard lock(mutex_);
    if (done_) return;
    done_ = true;
    error_ = std::move(error);
  }
  done_cv_.notify_all();
}

WorkPtr completed_work(std::exception_ptr error) {
  auto work = std::make_shared<CompletionWork>(Duration::zero());
  work->complete(std::move(error));
  return work;
}

}  // namespace ctrun::comm
