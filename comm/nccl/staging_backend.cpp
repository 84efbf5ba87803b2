#include "comm/nccl/staging_backend.hpp"

#include <algorithm>
#include <string>

#include "comm/nccl/cuda_check.hpp"
#include "comm/nccl/nccl_backend.hpp"
#include "comm/nccl/stream.hpp"

namespace ctrun::comm::nccl {
namespace {

// The host backend of a sub-group is created with the host backend of the parent (a cpu backend may look at
// its parent's transports), not with this wrapper.
BackendContext unwrap_parent(BackendContext context) {
  if (auto* staging = dynamic_cast<StagingBackend*>(context.parent)) context.parent = &staging->host_backend();
  return context;
}

// Host ops poll for completion; copies back are rare compared with the op itself, so a short sleep is enough.
constexpr auto kCompletionPoll = std::chrono::microseconds(100);

}  // namespace

StagingBackend::StagingBackend(BackendContext context, const BackendFactory& make_host_backend)
    : Backend(context), host_(make_host_backend(unwrap_parent(std::move(context)))) {}

StagingBackend::~StagingBackend() {
  bool busy = false;
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
    busy = !pending_.empty();
  }
  // Ops still in flight would keep the completion thread waiting up to the group timeout: fail them now.
  if (busy) host_->abort("process group destroyed while CUDA-staged ops were in flight");
  cv_.notify_all();
  if (completer_.joinable()) completer_.join();
  for (auto& [device, stream] : copy_streams_) {
    DeviceGuard guard(device);
    cudaStreamDestroy(stream);
  }
}

Buffer StagingBackend::stage(Buffer b, Role role, Plan& plan) {
  if (!b.is_cuda()) return b;
  const int device = b.device().index;
  PinnedBlock block = PinnedPool::instance().acquire(b.bytes());
  Buffer host(block.data(), b.count(), b.dtype(), Device::cpu());
  DeviceGuard guard(device);
  if (role != Role::kOut && b.bytes() > 0) {
    cuda_check(cudaMemcpyAsync(host.data(), b.data(), b.bytes(), cudaMemcpyDeviceToHost, current_stream()),
               "cudaMemcpyAsync D2H (staging " + std::to_string(b.bytes()) + " bytes)");
  }
  // Every device involved is synchronised, outputs included: kernels still reading an output must finish
  // before the copy back overwrites it.
  if (std::find(plan.devices.begin(), plan.devices.end(), device) == plan.devices.end()) {
    plan.devices.push_back(device);
  }
  if (role != Role::kIn) plan.copy_back.emplace_back(b, host);
  plan.blocks.push_back(std::move(block));
  return host;
}

void StagingBackend::finish_staging(Plan& plan) {
  for (int device : plan.devices) {
    DeviceGuard guard(device);
    cuda_check(cudaStreamSynchronize(current_stream()), "cudaStreamSynchronize (staging)");
  }
}

WorkPtr StagingBackend::complete_later(WorkPtr host_work, Plan plan) {
  if (plan.blocks.empty()) return host_work;
  auto work = std::make_shared<CompletionWork>(context_.options.timeout);
  {
    std::lock_guard lock(mutex_);
    pending_.push_back({std::move(host_work), std::move(plan), work});
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

void StagingBackend::run_completions() {
  std::unique_lock lock(mutex_);
  while (!(stop_ && pending_.empty())) {
    std::vector<Pending> done;
    for (auto it = pending_.begin(); it != pending_.end();) {
      if (it->host_work->is_completed()) {
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
      std::exception_ptr error = p.host_work->exception();
      if (!error) {
        try {
          std::vector<int> used;
          for (const auto& [device_buffer, host_buffer] : p.plan.copy_back) {
            if (device_buffer.bytes() == 0) continue;
            const int device = device_buffer.device().index;
            DeviceGuard guard(device);
            cuda_check(cudaMemcpyAsync(device_buffer.data(), host_buffer.data(), device_buffer.bytes(),
                                       cudaMemcpyHostToDevice, copy_stream(device)),
                       "cudaMemcpyAsync H2D (staging)");
            if (std::find(used.begin(), used.end(), device) == used.end()) used.push_back(device);
          }
          for (int device : used) {
            DeviceGuard guard(device);
            cuda_check(cudaStreamSynchronize(copy_stream(device)), "cudaStreamSynchronize (staging)");
          }
        } catch (...) {
          error = std::current_exception();
        }
      }
      p.work->complete(error);
    }
    done.clear();  // pinned blocks go back to the pool before the lock is retaken
    lock.lock();
  }
}

WorkPtr StagingBackend::send(Buffer buffer, int dst, int tag) {
  if (!buffer.is_cuda()) return host_->send(buffer, dst, tag);
  Plan plan;
  Buffer host = stage(buffer, Role::kIn, plan);
  finish_staging(plan);
  return complete_later(host_->send(host, dst, tag), std::move(plan));
}

WorkPtr StagingBackend::recv(Buffer buffer, int src, int tag) {
  if (!buffer.is_cuda()) return host_->recv(buffer, src, tag);
  Plan plan;
  Buffer host = stage(buffer, Role::kOut, plan);
  finish_staging(plan);
  return complete_later(host_->recv(host, src, tag), std::move(plan));
}

WorkPtr StagingBackend::batch_p2p(std::vector<P2POp> ops) {
  Plan plan;
  for (auto& op : ops) op.buffer = stage(op.buffer, op.kind == P2POp::Kind::kSend ? Role::kIn : Role::kOut, plan);
  finish_staging(plan);
  return complete_later(host_->batch_p2p(std::move(ops)), std::move(plan));
}

WorkPtr StagingBackend::broadcast(Buffer buffer, int root) {
  Plan plan;
  Buffer host = stage(buffer, rank() == root ? Role::kIn : Role::kOut, plan);
  finish_staging(plan);
  return complete_later(host_->broadcast(host, root), std::move(plan));
}

WorkPtr StagingBackend::all_reduce(Buffer buffer, ReduceOp op) {
  Plan plan;
  Buffer host = stage(buffer, Role::kInOut, plan);
  finish_staging(plan);
  return complete_later(host_->all_reduce(host, op), std::move(plan));
}

WorkPtr StagingBackend::reduce(Buffer buffer, int root, ReduceOp op) {
  Plan plan;
  // Non-roots' buffers are scratch after a reduce: only the root's result is copied back.
  Buffer host = stage(buffer, rank() == root ? Role::kInOut : Role::kIn, plan);
  finish_staging(plan);
  return complete_later(host_->reduce(host, root, op), std::move(plan));
}

WorkPtr StagingBackend::all_gather(std::vector<Buffer> outputs, Buffer input) {
  Plan plan;
  for (auto& o : outputs) o = stage(o, Role::kOut, plan);
  Buffer host_input = stage(input, Role::kIn, plan);
  finish_staging(plan);
  return complete_later(host_->all_gather(std::move(outputs), host_input), std::move(plan));
}

WorkPtr StagingBackend::gather(std::vector<Buffer> outputs, Buffer input, int root) {
  Plan plan;
  for (auto& o : outputs) o = stage(o, Role::kOut, plan);
  Buffer host_input = stage(input, Role::kIn, plan);
  finish_staging(plan);
  return complete_later(host_->gather(std::move(outputs), host_input, root), std::move(plan));
}

WorkPtr StagingBackend::scatter(Buffer output, std::vector<Buffer> inputs, int root) {
  Plan plan;
  for (auto& in : inputs) in = stage(in, Role::kIn, plan);
  Buffer host_output = stage(output, Role::kOut, plan);
  finish_staging(plan);
  return complete_later(host_->scatter(host_output, std::move(inputs), root), std::move(plan));
}

WorkPtr StagingBackend::reduce_scatter(Buffer output, std::vector<Buffer> inputs, ReduceOp op) {
  Plan plan;
  for (auto& in : inputs) in = stage(in, Role::kIn, plan);
  Buffer host_output = stage(output, Role::kOut, plan);
  finish_staging(plan);
  return complete_later(host_->reduce_scatter(host_output, std::move(inputs), op), std::move(plan));
}

WorkPtr StagingBackend::all_to_all(std::vector<Buffer> outputs, std::vector<Buffer> inputs) {
  Plan plan;
  for (auto& in : inputs) in = stage(in, Role::kIn, plan);
  for (auto& o : outputs) o = stage(o, Role::kOut, plan);
  finish_staging(plan);
  return complete_later(host_->all_to_all(std::move(outputs), std::move(inputs)), std::move(plan));
}

void StagingBackend::abort(const std::string& reason) { host_->abort(reason); }

std::unique_ptr<Backend> make_cuda_staging_backend(BackendContext context, const BackendFactory& make_host_backend) {
  return std::make_unique<StagingBackend>(std::move(context), make_host_backend);
}

}  // namespace ctrun::comm::nccl
