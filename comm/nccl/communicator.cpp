#include "comm/nccl/communicator.hpp"

#include <string>
#include <thread>

#include "common/log.hpp"

namespace ctrun::comm::nccl {
namespace {

// Polling cadence of a call in progress: spin briefly (enqueues finish in microseconds), then back off so a long
// connection setup does not burn a core.
void backoff(int& round) {
  if (round < 64) {
    std::this_thread::yield();
  } else {
    std::this_thread::sleep_for(std::chrono::microseconds(round < 1000 ? 50 : 1000));
  }
  ++round;
}

}  // namespace

ncclConfig_t Communicator::make_config(bool blocking) {
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = blocking ? 1 : 0;
  return config;
}

std::unique_ptr<Communicator> Communicator::init(int device, int rank, int size, const ncclUniqueId& id,
                                                 bool blocking, Clock::time_point deadline) {
  DeviceGuard guard(device);
  ncclConfig_t config = make_config(blocking);
  ncclComm_t comm = nullptr;
  ncclResult_t r = ncclCommInitRankConfig(&comm, size, id, rank, &config);
  if (comm == nullptr)
    throw_nccl(r, "ncclCommInitRankConfig(rank " + std::to_string(rank) + " of " + std::to_string(size) + ")");
  std::unique_ptr<Communicator> self(new Communicator(comm, device));
  try {
    self->complete(r, "ncclCommInitRankConfig (waiting for every rank to join)", deadline);
  } catch (...) {
    self->abort();
    throw;
  }
  return self;
}

std::unique_ptr<Communicator> Communicator::split(Communicator& parent, int key, bool blocking,
                                                  Clock::time_point deadline) {
  DeviceGuard guard(parent.device_);
  ncclConfig_t config = make_config(blocking);
  // Non-blocking: NCCL 2.28 (seen on an H100) may return ncclSuccess before the split job has written the new
  // handle, which it does through the pointer it was given when the job ends. So the slot is polled (bounded by
  // the deadline, the parent's errors checked) and must outlive a call that gives up: then it is leaked (8 bytes).
  auto slot = std::make_unique<ncclComm_t>(nullptr);
  ncclResult_t r = ncclCommSplit(parent.comm_, 0, key, slot.get(), &config);
  if (r != ncclSuccess && r != ncclInProgress) throw_nccl(r, "ncclCommSplit", parent.comm_);
  auto handle = [&slot] { return __atomic_load_n(slot.get(), __ATOMIC_ACQUIRE); };
  try {
    // NCCL asks that an in-progress call settle on a non-blocking communicator before its next call.
    if (r == ncclInProgress) parent.complete(r, "ncclCommSplit (parent communicator)", deadline);
    for (int round = 0; handle() == nullptr; backoff(round)) {
      if (Clock::now() > deadline) {
        throw TimeoutError("ncclCommSplit did not hand over the new communicator within the group timeout");
      }
      if (ncclResult_t e = parent.async_error(); e != ncclSuccess && e != ncclInProgress) {
        throw_nccl(e, "ncclCommSplit (parent communicator)", parent.comm_);
      }
    }
  } catch (...) {
    if (ncclComm_t late = handle(); late != nullptr) {
      ncclCommAbort(late);
    } else {
      (void)slot.release();  // the job may still write the handle
    }
    throw;
  }
  std::unique_ptr<Communicator> self(new Communicator(handle(), parent.device_));
  try {
    self->complete(ncclInProgress, "ncclCommSplit (new communicator)", deadline);
  } catch (...) {
    self->abort();
    throw;
  }
  return self;
}

void Communicator::complete(ncclResult_t issued, std::string_view what, Clock::time_point deadline) {
  ncclResult_t r = issued;
  for (int round = 0; r == ncclInProgress; backoff(round)) {
    if (aborted_.load()) throw CommError(std::string(what) + ": the communicator was aborted");
    if (Clock::now() > deadline) {
      throw TimeoutError(std::string(what) +
                         " did not complete within the group timeout (a peer may be missing, "
                         "stalled or calling a different op); aborting the communicator");
    }
    std::lock_guard lock(abort_mutex_);  // never query a communicator that abort() is freeing
    if (aborted_.load()) continue;
    if (ncclResult_t q = ncclCommGetAsyncError(comm_, &r); q != ncclSuccess) r = q;
  }
  if (r != ncclSuccess) throw_nccl(r, what, comm_);
}

ncclResult_t Communicator::async_error() {
  std::lock_guard lock(abort_mutex_);
  if (aborted_.load()) return ncclSuccess;  // the handle is gone; the abort's reason was reported already
  ncclResult_t r = ncclSuccess;
  if (ncclResult_t q = ncclCommGetAsyncError(comm_, &r); q != ncclSuccess) return q;
  return r;
}

void Communicator::abort() {
  std::lock_guard lock(abort_mutex_);
  if (aborted_.exchange(true)) return;
  DeviceGuard guard(device_);
  if (ncclResult_t r = ncclCommAbort(comm_); r != ncclSuccess) {
    log::get("comm")->warn("ncclCommAbort failed: {}", ncclGetErrorString(r));
  }
}

Communicator::~Communicator() {
  if (aborted_.load()) return;
  try {
    DeviceGuard guard(device_);
    // Finalize flushes outstanding ops; bounded so a dead peer cannot hang the destructor.
    complete(ncclCommFinalize(comm_), "ncclCommFinalize", Clock::now() + std::chrono::seconds(10));
    ncclCommDestroy(comm_);
    aborted_.store(true);
  } catch (const std::exception& e) {
    log::get("comm")->warn("nccl: closing the communicator failed ({}); aborting it", e.what());
    abort();
  }
}

}  // namespace ctrun::comm::nccl
