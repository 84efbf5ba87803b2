#pragma once
// One NCCL communicator with bounded waits. Communicators are created non-blocking (config.blocking = 0), so
// initialisation, connection setup and finalisation never block a thread forever: every call that answers
// ncclInProgress is polled through ncclCommGetAsyncError until done, a deadline, or an abort from another
// thread (the watchdog). `blocking` (CTRUN_COMM_NCCL_BLOCKING=1) selects blocking communicators (NCCL's default).

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <string_view>

#include "comm/nccl/cuda_check.hpp"

namespace ctrun::comm::nccl {

using Clock = std::chrono::steady_clock;

class Communicator {
 public:
  // Joins the communicator `id` as `rank` of `size` on `device`. Throws TimeoutError when not every rank joined
  // by `deadline` (the half-made communicator is aborted), PeerError/CommError on NCCL errors.
  static std::unique_ptr<Communicator> init(int device, int rank, int size, const ncclUniqueId& id, bool blocking,
                                            Clock::time_point deadline);
  // ncclCommSplit of `parent` (collective over every rank of the parent): new rank order by `key`.
  static std::unique_ptr<Communicator> split(Communicator& parent, int key, bool blocking,
                                             Clock::time_point deadline);

  ~Communicator();  // finalises when healthy (bounded), aborts otherwise
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  ncclComm_t get() const { return comm_; }
  int device() const { return device_; }

  // Completes a call that returned `issued`: returns on success, polls while ncclInProgress, throws on error,
  // at `deadline` (TimeoutError) or when abort() is called meanwhile (CommError).
  void complete(ncclResult_t issued, std::string_view what, Clock::time_point deadline);

  // ncclSuccess, ncclInProgress or the error that broke the communicator (a failed peer, a network error).
  ncclResult_t async_error();

  // ncclCommAbort: makes pending kernels return and frees the communicator. Idempotent, thread-safe.
  void abort();
  bool aborted() const { return aborted_.load(); }

 private:
  Communicator(ncclComm_t comm, int device) : comm_(comm), device_(device) {}
  static ncclConfig_t make_config(bool blocking);

  ncclComm_t comm_;
  int device_;
  std::atomic<bool> aborted_{false};
  std::mutex abort_mutex_;
};

}  // namespace ctrun::comm::nccl
