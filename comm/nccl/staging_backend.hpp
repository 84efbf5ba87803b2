#pragma once
// A Backend decorator that lets a host backend (cpu) take CUDA buffers: each CUDA buffer of an op is copied into
// pinned host memory (ordered after the caller's current stream, then synchronised, since the host backend reads
// it right away), the host backend runs the op on the copies, and a completion thread copies outputs back to the
// device before the returned Work completes. Ops with only host buffers go straight to the host backend.

#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include <cuda_runtime_api.h>

#include "comm/backend.hpp"
#include "comm/nccl/pinned_pool.hpp"

namespace ctrun::comm::nccl {

class StagingBackend final : public Backend {
 public:
  StagingBackend(BackendContext context, const BackendFactory& make_host_backend);
  ~StagingBackend() override;

  std::string_view name() const override { return host_->name(); }
  bool supports(Device device) const override { return device.is_cuda() || host_->supports(device); }
  Backend& host_backend() { return *host_; }

  WorkPtr send(Buffer buffer, int dst, int tag) override;
  WorkPtr recv(Buffer buffer, int src, int tag) override;
  WorkPtr batch_p2p(std::vector<P2POp> ops) override;
  WorkPtr broadcast(Buffer buffer, int root) override;
  WorkPtr all_reduce(Buffer buffer, ReduceOp op) override;
  WorkPtr reduce(Buffer buffer, int root, ReduceOp op) override;
  WorkPtr all_gather(std::vector<Buffer> outputs, Buffer input) override;
  WorkPtr gather(std::vector<Buffer> outputs, Buffer input, int root) override;
  WorkPtr scatter(Buffer output, std::vector<Buffer> inputs, int root) override;
  WorkPtr reduce_scatter(Buffer output, std::vector<Buffer> inputs, ReduceOp op) override;
  WorkPtr all_to_all(std::vector<Buffer> outputs, std::vector<Buffer> inputs) override;
  WorkPtr barrier() override { return host_->barrier(); }
  void abort(const std::string& reason) override;

 private:
  // The host copies of one op's CUDA buffers and what to copy back.
  struct Plan {
    std::vector<PinnedBlock> blocks;
    std::vector<std::pair<Buffer, Buffer>> copy_back;  // (device buffer, its host copy)
    std::vector<int> devices;                          // devices whose current stream fed the copies
  };
  enum class Role { kIn, kOut, kInOut };
  // Returns the host view of `b` (b itself on the host); kIn/kInOut copy the device contents in.
  Buffer stage(Buffer b, Role role, Plan& plan);
  // Waits for the device-to-host copies queued by stage().
  void finish_staging(Plan& plan);
  // Hands the host op's Work and the plan to the completion thread; returns the caller's Work.
  WorkPtr complete_later(WorkPtr host_work, Plan plan);
  void run_completions();
  cudaStream_t copy_stream(int device);

  std::unique_ptr<Backend> host_;
  struct Pending {
    WorkPtr host_work;
    Plan plan;
    std::shared_ptr<CompletionWork> work;
  };
  std::mutex mutex_;
  std::condition_variable cv_;
  std::vector<Pending> pending_;
  bool stop_ = false;
  std::map<int, cudaStream_t> copy_streams_;  // only the completion thread touches it
  std::thread completer_;
};

}  // namespace ctrun::comm::nccl
