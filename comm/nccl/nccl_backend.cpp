#include "comm/nccl/nccl_backend_impl.hpp"

#include <cstring>
#include <string>
#include <utility>

#include "comm/nccl/nccl_backend.hpp"
#include "comm/nccl/staging_backend.hpp"
#include "comm/nccl/stream.hpp"
#include "comm/nccl/unique_id_exchange.hpp"
#include "comm/progress_slot.hpp"
#include "common/log.hpp"

namespace ctrun::comm::nccl {
namespace {

int device_count_or_throw() {
  int count = 0;
  if (cudaError_t err = cudaGetDeviceCount(&count); err != cudaSuccess) {
    cudaGetLastError();
    throw UnsupportedError(std::string("the nccl backend needs a CUDA GPU, but cudaGetDeviceCount failed: ") +
                           cudaGetErrorName(err) + " (" + cudaGetErrorString(err) +
                           "); this machine has no usable GPU or NVIDIA driver: use backend 'cpu'");
  }
  if (count == 0) {
    throw UnsupportedError(
        "the nccl backend needs a CUDA GPU, but none is visible (CUDA_VISIBLE_DEVICES?); "
        "use backend 'cpu'");
  }
  return count;
}

// See make_nccl_backend's comment for the rule; torchrun users call cudaSetDevice(LOCAL_RANK) or rely on it.
int choose_device(int count, const Config& config) {
  if (config.device >= 0) {
    if (config.device >= count) {
      throw InvalidArgumentError("CTRUN_COMM_DEVICE=" + std::to_string(config.device) + " but only " +
                                 std::to_string(count) + " CUDA device(s) are visible");
    }
    return config.device;
  }
  int current = 0;
  cuda_check(cudaGetDevice(&current), "cudaGetDevice");
  if (current != 0) return current;
  if (config.worker.local_rank) return *config.worker.local_rank % count;
  return 0;
}

}  // namespace

ncclResult_t run_grouped(const std::function<ncclResult_t()>& calls) {
  if (ncclResult_t r = ncclGroupStart(); r != ncclSuccess) return r;
  ncclResult_t first = calls();
  ncclResult_t end = ncclGroupEnd();
  return first != ncclSuccess && first != ncclInProgress ? first : end;
}

NcclBackend::NcclBackend(BackendContext context) : Backend(std::move(context)) {
  const int count = device_count_or_throw();
  auto* parent = dynamic_cast<NcclBackend*>(context_.parent);
  device_ = parent != nullptr ? parent->device_ : choose_device(count, context_.config);
  DeviceGuard guard(device_);
  try {
    connect(parent);
  } catch (...) {
    release_device_resources();  // no destructor runs for a constructor that throws
    throw;
  }
  progress_ = StreamProgress(claim_progress_slot(context_));
  watchdog_ = std::make_unique<Watchdog>(
      *communicator_, [this](std::exception_ptr e) { fail(std::move(e)); }, &progress_);
  log::get("comm")->debug("nccl: rank {} of {} on cuda:{} ready", rank(), size(), device_);
}

void NcclBackend::connect(NcclBackend* parent) {
  cuda_check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
  cuda_check(cudaEventCreateWithFlags(&caller_ready_, cudaEventDisableTiming), "cudaEventCreateWithFlags");
  cuda_check(cudaMalloc(&barrier_buffer_, sizeof(std::int32_t)), "cudaMalloc(barrier buffer)");
  cuda_check(cudaMemset(barrier_buffer_, 0, sizeof(std::int32_t)), "cudaMemset(barrier buffer)");
  events_ = std::make_shared<EventPool>(device_);

  const auto deadline = Clock::now() + context_.options.timeout;
  // ncclCommSplit is collective over the whole parent: usable only when every parent rank is in this group
  // (non-members of a new_group create no backend). Otherwise a fresh id through the group's store.
  if (parent != nullptr && !parent->failed_.load() && parent->size() == size()) {
    communicator_ = Communicator::split(*parent->communicator_, rank(), context_.config.nccl_blocking, deadline);
    return;
  }
  std::string id = exchange_unique_id(*context_.store, rank(), size(), context_.options.timeout, [] {
    ncclUniqueId uid;
    if (ncclResult_t r = ncclGetUniqueId(&uid); r != ncclSuccess) throw_nccl(r, "ncclGetUniqueId");
    return std::string(reinterpret_cast<const char*>(&uid), sizeof(uid));
  });
  if (id.size() != sizeof(ncclUniqueId)) {
    throw PeerError("nccl: the unique id from rank 0 has " + std::to_string(id.size()) + " bytes, expected " +
                    std::to_string(sizeof(ncclUniqueId)) + " (a different NCCL build on rank 0?)");
  }
  ncclUniqueId uid;
  std::memcpy(&uid, id.data(), sizeof(uid));
  communicator_ = Communicator::init(device_, rank(), size(), uid, context_.config.nccl_blocking, deadline);
}

NcclBackend::~NcclBackend() {
  watchdog_.reset();      // no verdicts while tearing down
  progress::release_slot(progress_.writer());
  communicator_.reset();  // finalize (bounded) or abort
  try {
    DeviceGuard guard(device_);
    release_device_resources();
  } catch (const std::exception& e) {
    log::get("comm")->warn("nccl: releasing device resources failed: {}", e.what());
  }
}

void NcclBackend::release_device_resources() {
  if (barrier_buffer_ != nullptr) cudaFree(std::exchange(barrier_buffer_, nullptr));
  if (caller_ready_ != nullptr) cudaEventDestroy(std::exchange(caller_ready_, nullptr));
  if (stream_ != nullptr) cudaStreamDestroy(std::exchange(stream_, nullptr));
}

void NcclBackend::check_device(const Buffer& b, std::string_view what) const {
  if (b.device() == Device::cuda(device_)) return;
  throw InvalidArgumentError("nccl " + std::string(what) + ": buffer on " + to_string(b.device()) + ", but rank " +
                             std::to_string(rank()) + "'s nccl group uses cuda:" + std::to_string(device_) +
                             " (pass buffers on that device, or pick the group's device with cudaSetDevice or "
                             "CTRUN_COMM_DEVICE before creating the group)");
}

void NcclBackend::copy_on_stream(void* dst, const void* src, std::size_t bytes) {
  if (dst == src || bytes == 0) return;
  cuda_check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream_), "cudaMemcpyAsync D2D");
}

WorkPtr NcclBackend::launch(const std::string& what, const std::function<ncclResult_t()>& enqueue, bool host_sync,
                            std::optional<RecordedOp> record) {
  std::lock_guard lock(issue_mutex_);
  if (failed_.load()) {
    std::lock_guard error_lock(error_mutex_);
    return completed_work(error_);
  }
  DeviceGuard guard(device_);
  cuda_check(cudaEventRecord(caller_ready_, current_stream()), "cudaEventRecord(caller stream)");
  cuda_check(cudaStreamWaitEvent(stream_, caller_ready_, 0), "cudaStreamWaitEvent(group stream)");
  const auto deadline = Clock::now() + context_.options.timeout;
  try {
    communicator_->complete(enqueue(), "nccl " + what, deadline);
  } catch (const InvalidArgumentError&) {
    throw;  // a usage error leaves the communicator intact
  } catch (...) {
    fail(std::current_exception());
    throw;
  }
  cudaEvent_t done = events_->acquire();
  cuda_check(cudaEventRecord(done, stream_), "cudaEventRecord(op done)");
  auto work = std::make_shared<NcclWork>(events_, done, what, deadline, host_sync);
  if (record) work->record = progress_.issued(record->op, record->dtype, record->bytes);
  watchdog_->track(work);
  return work;
}

void NcclBackend::fail(std::exception_ptr error) {
  {
    std::lock_guard lock(error_mutex_);
    if (!error_) error_ = error;
    failed_.store(true);
  }
  // Waiters first: ncclCommAbort may take a while (it waits for the kernels it stops); new ops are already
  // refused through failed_.
  watchdog_->fail_all(error);
  communicator_->abort();  // stuck kernels return; no rank keeps waiting on a dead peer
}

void NcclBackend::abort(const std::string& reason) {
  fail(std::make_exception_ptr(CommError("nccl group aborted: " + reason)));
}

int device_of(Backend& backend) {
  Backend* b = &backend;
  if (auto* staging = dynamic_cast<StagingBackend*>(b)) b = &staging->inner();
  auto* nccl = dynamic_cast<NcclBackend*>(b);
  return nccl != nullptr ? nccl->device() : -1;
}

std::unique_ptr<Backend> make_nccl_backend(BackendContext context) {
  // Host buffers are staged through the group's GPU, so code written for the cpu backend (comm's examples) runs
  // unchanged with --backend nccl; device buffers go straight to NCCL.
  return std::make_unique<StagingBackend>(
      std::move(context), StagingBackend::Direction::kToDevice,
      [](BackendContext ctx) { return std::make_unique<NcclBackend>(std::move(ctx)); },
      [](Backend& inner) { return static_cast<NcclBackend&>(inner).device(); });
}

}  // namespace ctrun::comm::nccl
