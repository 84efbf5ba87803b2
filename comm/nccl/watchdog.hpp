#pragma once
// One thread per nccl group that watches its in-flight ops (torch's NCCL watchdog): it retires finished ops,
// and when one outlives its deadline or NCCL reports an asynchronous error (a peer died, the network broke) it
// calls on_failure, which aborts the communicator (ncclCommAbort makes the stuck kernels return) and fails
// every pending Work, so no rank waits forever on a dead peer.

#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "comm/nccl/communicator.hpp"
#include "comm/nccl/nccl_work.hpp"
#include "comm/nccl/stream_progress.hpp"

namespace ctrun::comm::nccl {

class Watchdog {
 public:
  using FailureHandler = std::function<void(std::exception_ptr)>;

  // `progress`: the group's record (its run part is written by this thread only); null or disabled: none.
  Watchdog(Communicator& communicator, FailureHandler on_failure, StreamProgress* progress = nullptr);
  ~Watchdog();  // stops the thread
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

  void track(std::shared_ptr<NcclWork> work);
  // Fails every tracked Work with `error` and forgets them (after an abort).
  void fail_all(std::exception_ptr error);

 private:
  void run();
  std::exception_ptr check(const std::vector<std::shared_ptr<NcclWork>>& works);
  void record(const std::vector<std::shared_ptr<NcclWork>>& works);

  Communicator& communicator_;
  FailureHandler on_failure_;
  StreamProgress* progress_;
  std::mutex mutex_;
  std::condition_variable cv_;
  std::vector<std::shared_ptr<NcclWork>> pending_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace ctrun::comm::nccl
