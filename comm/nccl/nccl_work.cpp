#include "comm/nccl/nccl_work.hpp"

#include <thread>

#include "comm/nccl/stream.hpp"

namespace ctrun::comm::nccl {

EventPool::~EventPool() {
  // Best effort: at process exit the CUDA context may already be gone.
  for (cudaEvent_t e : free_) cudaEventDestroy(e);
}

cudaEvent_t EventPool::acquire() {
  {
    std::lock_guard lock(mutex_);
    if (!free_.empty()) {
      cudaEvent_t e = free_.back();
      free_.pop_back();
      return e;
    }
  }
  DeviceGuard guard(device_);
  cudaEvent_t e = nullptr;
  cuda_check(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "cudaEventCreateWithFlags");
  return e;
}

void EventPool::release(cudaEvent_t event) {
  std::lock_guard lock(mutex_);
  free_.push_back(event);
}

NcclWork::NcclWork(std::shared_ptr<EventPool> pool, cudaEvent_t done, std::string what, Clock::time_point deadline,
                   bool host_sync)
    : pool_(std::move(pool)), done_(done), what_(std::move(what)), deadline_(deadline), host_sync_(host_sync) {}

NcclWork::~NcclWork() {
  // A recorded event may be re-recorded once its Work is gone: nothing waits on it any more.
  pool_->release(done_);
}

bool NcclWork::poll() {
  if (state_.load(std::memory_order_acquire) != kPending) return true;
  cudaError_t q = cudaEventQuery(done_);
  if (q == cudaSuccess) {
    int expected = kPending;
    state_.compare_exchange_strong(expected, kDone);
    return true;
  }
  if (q == cudaErrorNotReady) return false;
  try {
    throw_cuda(q, "cudaEventQuery(" + what_ + ")");
  } catch (...) {
    fail(std::current_exception());
  }
  return true;
}

void NcclWork::fail(std::exception_ptr error) {
  {
    std::lock_guard lock(error_mutex_);
    if (state_.load() != kPending) return;
    error_ = std::move(error);
    state_.store(kFailed, std::memory_order_release);
  }
}

bool NcclWork::is_completed() { return poll(); }

std::exception_ptr NcclWork::exception() {
  poll();
  std::lock_guard lock(error_mutex_);
  return error_;
}

void NcclWork::rethrow_if_failed() {
  if (state_.load(std::memory_order_acquire) != kFailed) return;
  std::lock_guard lock(error_mutex_);
  std::rethrow_exception(error_);
}

void NcclWork::host_wait(Clock::time_point until) {
  for (int round = 0; !poll(); ++round) {
    if (Clock::now() > until) {
      throw TimeoutError("Work::wait on nccl " + what_ + " timed out; the op is still running on the GPU");
    }
    // Spin first (small ops finish in microseconds), then sleep so a long wait does not burn a core.
    if (round < 200) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(std::chrono::microseconds(round < 2000 ? 20 : 500));
    }
  }
  rethrow_if_failed();
}

void NcclWork::wait(Duration timeout) {
  if (timeout != Duration::zero()) return host_wait(Clock::now() + timeout);
  if (host_sync_) return synchronize();
  rethrow_if_failed();
  if (state_.load(std::memory_order_acquire) == kDone) return;
  // Device-side wait: later work on the caller's stream starts after the op, the host carries on.
  DeviceGuard guard(pool_->device());
  if (cudaError_t err = cudaStreamWaitEvent(current_stream(), done_, 0); err != cudaSuccess) {
    throw_cuda(err, "cudaStreamWaitEvent(" + what_ + ")");  // message built only on failure: hot path
  }
}

void NcclWork::synchronize() {
  // The watchdog fails the op at its deadline; the slack lets its more precise error win.
  host_wait(deadline_ + std::chrono::seconds(5));
}

}  // namespace ctrun::comm::nccl
