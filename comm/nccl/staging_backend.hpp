#pragma once
// A Backend decorator that moves an op's buffers to where the wrapped backend can use them, runs the op there,
// and copies the outputs back before the returned Work completes:
//   kToHost    a host backend (cpu) takes CUDA buffers: copies into pinned host memory, ordered after the
//              caller's current stream (then synchronised: the host backend reads them right away);
//   kToDevice  the nccl backend takes host buffers (torch's NCCL refuses them; comm's examples keep their data
//              in host memory): copies into device memory on the backend's GPU.
// Buffers the wrapped backend already accepts go straight through, with no CUDA call. A completion thread waits
// for the wrapped op (polling its Work) and does the copy back, so async ops stay async.

#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include <cuda_runtime_api.h>

#include "comm/backend.hpp"
#include "comm/nccl/device_memory.hpp"
#include "comm/nccl/pinned_pool.hpp"

namespace ctrun::comm::nccl {

class StagingBackend final : public Backend {
 public:
  enum class Direction { kToHost, kToDevice };

  // kToDevice: `device_of_inner` says which GPU the wrapped backend runs on (where staged copies go).
  StagingBackend(BackendContext context, Direction direction, const BackendFactory& make_inner,
                 const std::function<int(Backend&)>& device_of_inner = {});
  ~StagingBackend() override;

  std::string_view name() const override { return inner_->name(); }
  // kToHost: CUDA buffers only where that device exists (without a GPU they are invalid arguments, as in CPU-only
  // builds). kToDevice: host buffers always.
  bool supports(Device device) const override;
  bool supports_self_p2p() const override { return inner_->supports_self_p2p(); }
  bool supports_any_source() const override { return inner_->supports_any_source(); }
  Backend& inner() { return *inner_; }

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
  WorkPtr barrier() override { return inner_->barrier(); }
  void abort(const std::string& reason) override;

 private:
  // The staged copies of one op's buffers and what to copy back.
  struct Plan {
    std::vector<PinnedBlock> host_blocks;              // kToHost
    std::vector<DeviceBuffer> device_blocks;           // kToDevice
    std::vector<std::pair<Buffer, Buffer>> copy_back;  // (caller's buffer, its staged copy)
    std::vector<int> devices;                          // kToHost: devices whose current stream fed the copies
    bool empty() const { return host_blocks.empty() && device_blocks.empty(); }
  };
  enum class Role { kIn, kOut, kInOut };
  bool needs_staging(const Buffer& b) const {
    return direction_ == Direction::kToHost ? b.is_cuda() : b.device().is_cpu();
  }
  // Returns the buffer the wrapped backend gets (`b` itself when it needs no staging); kIn/kInOut copy data in.
  Buffer stage(Buffer b, Role role, Plan& plan);
  // kToHost: waits for the device-to-host copies queued by stage().
  void finish_staging(Plan& plan);
  // Hands the wrapped op's Work and the plan to the completion thread; returns the caller's Work.
  WorkPtr complete_later(WorkPtr inner_work, Plan plan);
  void copy_back(Plan& plan);
  void run_completions();
  cudaStream_t copy_stream(int device);

  Direction direction_;
  int device_ = -1;  // kToDevice: the wrapped backend's GPU
  std::unique_ptr<Backend> inner_;
  struct Pending {
    WorkPtr inner_work;
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
