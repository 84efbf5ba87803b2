#include "comm/nccl/staging_backend.hpp"

#include <algorithm>
#include <string>

#include "comm/nccl/cuda_check.hpp"
#include "comm/nccl/device_memory.hpp"
#include "comm/nccl/staging.hpp"
#include "comm/nccl/stream.hpp"

namespace ctrun::comm::nccl {
namespace {

// The wrapped backend of a sub-group is created with the wrapped backend of the parent (nccl splits its
// parent's communicator, a cpu backend may look at its parent's transports), not with this wrapper.
BackendContext unwrap_parent(BackendContext context) {
  if (auto* staging = dynamic_cast<StagingBackend*>(context.parent)) context.parent = &staging->inner();
  return context;
}

// Wrapped ops are polled for completion; copies back are rare next to the op itself, so a short sleep is enough.
constexpr auto kCompletionPoll = std::chrono::microseconds(100);

void add_device(std::vector<int>& devices, int device) {
  if (std::find(devices.begin(), devices.end(), device) == devices.end()) devices.push_back(device);
}

}  // namespace

StagingBackend::StagingBackend(BackendContext context, Direction direction, const BackendFactory& make_inner,
                               const std::function<int(Backend&)>& device_of_inner)
    : Backend(context), direction_(direction), inner_(make_inner(unwrap_parent(std::move(context)))) {
  if (direction_ == Direction::kToDevice && device_of_inner) device_ = device_of_inner(*inner_);
}

StagingBackend::~StagingBackend() {
  bool busy = false;
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
    busy = !pending_.empty();
  }
  // Ops still in flight would keep the completion thread waiting up to the group timeout: fail them now.
  if (busy) inner_->abort("process group destroyed while staged ops were in flight");
  cv_.notify_all();
  if (completer_.joinable()) completer_.join();
  for (auto& [device, stream] : copy_streams_) {
    DeviceGuard guard(device);
    cudaStreamDestroy(stream);
  }
}

bool StagingBackend::supports(Device device) const {
  if (direction_ == Direction::kToDevice) return device.is_cpu() || inner_->supports(device);
  if (!device.is_cuda()) return inner_->supports(device);
  // Probed once per process (initialises the CUDA runtime), and only when a CUDA buffer is first seen.
  static const int devices = cuda_device_count();
  return device.index >= 0 && device.index < devices;
}

Buffer StagingBackend::stage(Buffer b, Role role, Plan& plan) {
  if (!needs_staging(b)) return b;
  if (direction_ == Direction::kToDevice) {
    // Host data is ready now: a synchronous upload, ordered before the op (which waits for the caller's stream).
    DeviceBuffer& block = plan.device_blocks.emplace_back(b.bytes(), device_);
    if (role != Role::kOut && b.bytes() > 0) block.upload(b.data(), b.bytes());
    Buffer staged(block.data(), b.count(), b.dtype(), Device::cuda(device_));
    if (role != Role::kIn) plan.copy_back.emplace_back(b, staged);
    return staged;
  }
  const int device = b.device().index;
  PinnedBlock& block = plan.host_blocks.emplace_back(PinnedPool::instance().acquire(b.bytes()));
  Buffer staged(block.data(), b.count(), b.dtype(), Device::cpu());
  DeviceGuard guard(device);
  if (role != Role::kOut && b.bytes() > 0) {
    cuda_check(cudaMemcpyAsync(staged.data(), b.data(), b.bytes(), cudaMemcpyDeviceToHost, current_stream()),
               "cudaMemcpyAsync D2H (staging " + std::to_string(b.bytes()) + " bytes)");
  }
  // Every device involved is synchronised, outputs included: kernels still reading an output must finish
  // before the copy back overwrites it.
  add_device(plan.devices, device);
  if (role != Role::kIn) plan.copy_back.emplace_back(b, staged);
  return staged;
}

void StagingBackend::finish_staging(Plan& plan) {
  for (int device : plan.devices) {
    DeviceGuard guard(device);
    cuda_check(cudaStreamSynchronize(current_stream()), "cudaStreamSynchronize (staging)");
  }
}

WorkPtr StagingBackend::complete_later(WorkPtr inner_work, Plan plan) {
  if (plan.empty()) return inner_work;
  auto work = std::make_shared<CompletionWork>(context_.options.timeout);
  {
    std::lock_guard lock(mutex_);
    pending_.push_back({std::move(inner_work), std::move(plan), work});
    if (!completer_.joinable()) completer_ = std::thread([this] { run_completions(); });
  }
  cv_.notify_all();
  return work;
}

cudaStream_t StagingBackend::copy_stream(int device) {
  auto it = copy_streams_.find(device);
  if (it != copy_streams_.end()) return it->second;
  DeviceGuard guard(device);
  cudaStream_t stream = nullptr;
  cuda_check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
  copy_streams_.emplace(device, stream);
  return stream;
}

void StagingBackend::copy_back(Plan& plan) {
  std::vector<int> used;
  for (const auto& [original, staged] : plan.copy_back) {
    if (original.bytes() == 0) continue;
    if (direction_ == Direction::kToDevice) {
      DeviceGuard guard(device_);
      cuda_check(cudaMemcpy(original.data(), staged.data(), original.bytes(), cudaMemcpyDeviceToHost),
                 "cudaMemcpy D2H (staging)");
      continue;
    }
    const int device = original.device().index;
    DeviceGuard guard(device);
    cuda_check(
        cudaMemcpyAsync(original.data(), staged.data(), original.bytes(), cudaMemcpyHostToDevice, copy_stream(device)),
        "cudaMemcpyAsync H2D (staging)");
    add_device(used, device);
  }
  for (int device : used) {
    DeviceGuard guard(device);
    cuda_check(cudaStreamSynchronize(copy_stream(device)), "cudaStreamSynchronize (staging)");
  }
}

void StagingBackend::run_completions() {
  std::unique_lock lock(mutex_);
  while (!(stop_ && pending_.empty())) {
    std::vector<Pending> done;
    for (auto it = pending_.begin(); it != pending_.end();) {
      if (it->inner_work->is_completed()) {
        done.push_back(std::move(*it));
        it = pending_.erase(it);
      } else {
        ++it;
      }
    }
    if (done.empty()) {
      if (pending_.empty()) {
        cv_.wait(lock, [this] { return stop_ || !pending_.empty(); });
      } else {
        cv_.wait_for(lock, kCompletionPoll);
      }
      continue;
    }
    lock.unlock();
    for (auto& p : done) {
      std::exception_ptr error = p.inner_work->exception();
      if (!error) {
        try {
          copy_back(p.plan);
        } catch (...) {
          error = std::current_exception();
        }
      }
      p.work->set_source_rank(p.inner_work->source_rank());
      p.work->complete(error);
    }
    done.clear();  // staging memory is released before the lock is retaken
    lock.lock();
  }
}

WorkPtr StagingBackend::send(Buffer buffer, int dst, int tag) {
  if (!needs_staging(buffer)) return inner_->send(buffer, dst, tag);
  Plan plan;
  Buffer staged = stage(buffer, Role::kIn, plan);
  finish_staging(plan);
  return complete_later(inner_->send(staged, dst, tag), std::move(plan));
}

WorkPtr StagingBackend::recv(Buffer buffer, int src, int tag) {
  if (!needs_staging(buffer)) return inner_->recv(buffer, src, tag);
  Plan plan;
  Buffer staged = stage(buffer, Role::kOut, plan);
  finish_staging(plan);
  return complete_later(inner_->recv(staged, src, tag), std::move(plan));
}

WorkPtr StagingBackend::batch_p2p(std::vector<P2POp> ops) {
  Plan plan;
  for (auto& op : ops) op.buffer = stage(op.buffer, op.kind == P2POp::Kind::kSend ? Role::kIn : Role::kOut, plan);
  finish_staging(plan);
  return complete_later(inner_->batch_p2p(std::move(ops)), std::move(plan));
}

WorkPtr StagingBackend::broadcast(Buffer buffer, int root) {
  Plan plan;
  Buffer staged = stage(buffer, rank() == root ? Role::kIn : Role::kOut, plan);
  finish_staging(plan);
  return complete_later(inner_->broadcast(staged, root), std::move(plan));
}

WorkPtr StagingBackend::all_reduce(Buffer buffer, ReduceOp op) {
  Plan plan;
  Buffer staged = stage(buffer, Role::kInOut, plan);
  finish_staging(plan);
  return complete_later(inner_->all_reduce(staged, op), std::move(plan));
}

WorkPtr StagingBackend::reduce(Buffer buffer, int root, ReduceOp op) {
  Plan plan;
  // Non-roots' buffers are scratch after a reduce: only the root's result is copied back.
  Buffer staged = stage(buffer, rank() == root ? Role::kInOut : Role::kIn, plan);
  finish_staging(plan);
  return complete_later(inner_->reduce(staged, root, op), std::move(plan));
}

WorkPtr StagingBackend::all_gather(std::vector<Buffer> outputs, Buffer input) {
  Plan plan;
  for (auto& o : outputs) o = stage(o, Role::kOut, plan);
  Buffer staged_input = stage(input, Role::kIn, plan);
  finish_staging(plan);
  return complete_later(inner_->all_gather(std::move(outputs), staged_input), std::move(plan));
}

WorkPtr StagingBackend::gather(std::vector<Buffer> outputs, Buffer input, int root) {
  Plan plan;
  for (auto& o : outputs) o = stage(o, Role::kOut, plan);
  Buffer staged_input = stage(input, Role::kIn, plan);
  finish_staging(plan);
  return complete_later(inner_->gather(std::move(outputs), staged_input, root), std::move(plan));
}

WorkPtr StagingBackend::scatter(Buffer output, std::vector<Buffer> inputs, int root) {
  Plan plan;
  for (auto& in : inputs) in = stage(in, Role::kIn, plan);
  Buffer staged_output = stage(output, Role::kOut, plan);
  finish_staging(plan);
  return complete_later(inner_->scatter(staged_output, std::move(inputs), root), std::move(plan));
}

WorkPtr StagingBackend::reduce_scatter(Buffer output, std::vector<Buffer> inputs, ReduceOp op) {
  Plan plan;
  for (auto& in : inputs) in = stage(in, Role::kIn, plan);
  Buffer staged_output = stage(output, Role::kOut, plan);
  finish_staging(plan);
  return complete_later(inner_->reduce_scatter(staged_output, std::move(inputs), op), std::move(plan));
}

WorkPtr StagingBackend::all_to_all(std::vector<Buffer> outputs, std::vector<Buffer> inputs) {
  Plan plan;
  for (auto& in : inputs) in = stage(in, Role::kIn, plan);
  for (auto& o : outputs) o = stage(o, Role::kOut, plan);
  finish_staging(plan);
  return complete_later(inner_->all_to_all(std::move(outputs), std::move(inputs)), std::move(plan));
}

void StagingBackend::abort(const std::string& reason) { inner_->abort(reason); }

std::unique_ptr<Backend> make_cuda_staging_backend(BackendContext context, const BackendFactory& make_host_backend) {
  return std::make_unique<StagingBackend>(std::move(context), StagingBackend::Direction::kToHost, make_host_backend);
}

}  // namespace ctrun::comm::nccl
