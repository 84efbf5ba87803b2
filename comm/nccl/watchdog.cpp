#include "comm/nccl/watchdog.hpp"

#include <algorithm>
#include <string>

namespace ctrun::comm::nccl {
namespace {
// How often in-flight ops are checked: fine enough that a timeout fires promptly, coarse enough to cost nothing.
constexpr auto kPollInterval = std::chrono::milliseconds(1);
}  // namespace

Watchdog::Watchdog(Communicator& communicator, FailureHandler on_failure, StreamProgress* progress)
    : communicator_(communicator),
      on_failure_(std::move(on_failure)),
      progress_(progress && progress->enabled() ? progress : nullptr),
      thread_([this] { run(); }) {}

Watchdog::~Watchdog() {
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void Watchdog::track(std::shared_ptr<NcclWork> work) {
  bool was_idle = false;
  {
    std::lock_guard lock(mutex_);
    was_idle = pending_.empty();
    pending_.push_back(std::move(work));
  }
  // Only an idle watchdog sleeps without a deadline; a busy one sees the op at its next poll (<= 1 ms). Not
  // waking it per op keeps a futex syscall off the small-message path.
  if (was_idle) cv_.notify_all();
}

void Watchdog::fail_all(std::exception_ptr error) {
  std::vector<std::shared_ptr<NcclWork>> works;
  {
    std::lock_guard lock(mutex_);
    works.swap(pending_);
  }
  for (auto& w : works) w->fail(error);
}

std::exception_ptr Watchdog::check(const std::vector<std::shared_ptr<NcclWork>>& works) {
  const auto now = Clock::now();
  for (const auto& w : works) {
    if (!w->poll() && now > w->deadline()) {
      return std::make_exception_ptr(
          TimeoutError("nccl " + w->what() +
                       " did not complete within the group timeout (a peer may have died, stalled or "
                       "called a different op); the communicator was aborted and the group is unusable"));
    }
  }
  ncclResult_t r = communicator_.async_error();
  if (r != ncclSuccess && r != ncclInProgress) {
    try {
      throw_nccl(r, "nccl communicator (watchdog)", communicator_.aborted() ? nullptr : communicator_.get());
    } catch (...) {
      return std::current_exception();
    }
  }
  return nullptr;
}

// The run part of the record: the tracked ops are in issue order, which is the order they run in on the stream;
// each finished one is done (it is retired right after, so once), the first unfinished one is running.
void Watchdog::record(const std::vector<std::shared_ptr<NcclWork>>& works) {
  if (!progress_) return;
  for (const auto& w : works) {
    if (!w->record) continue;
    if (!w->poll()) {
      progress_->at_head(*w->record);
      return;
    }
    progress_->done(*w->record, !w->failed());
  }
}

void Watchdog::run() {
  std::unique_lock lock(mutex_);
  while (!stop_) {
    if (pending_.empty()) {
      cv_.wait(lock, [this] { return stop_ || !pending_.empty(); });
      continue;
    }
    std::vector<std::shared_ptr<NcclWork>> works = pending_;
    lock.unlock();
    std::exception_ptr failure = check(works);
    record(works);
    if (failure) on_failure_(failure);  // aborts and calls fail_all
    lock.lock();
    // Retire finished ops (fail_all may have emptied the list meanwhile).
    std::erase_if(pending_, [](const std::shared_ptr<NcclWork>& w) { return w->poll(); });
    cv_.wait_for(lock, kPollInterval, [this] { return stop_; });
  }
}

}  // namespace ctrun::comm::nccl
