#pragma once
// The caller's "current stream" (torch.cuda.current_stream): comm's CUDA-aware ops are ordered after the work
// already queued on it, and Work::wait() makes it wait for the op. Thread-local, like torch's; the default is
// the legacy default stream (0) of the group's device. Set it to the stream your kernels run on:
//
//   ctrun::comm::nccl::StreamGuard guard(my_stream);
//   pg->all_reduce(grad_on_gpu);        // starts after my_stream's queued kernels; my_stream waits for it
//
// The stream must belong to the device the buffers (and the nccl group) live on.

#include <cuda_runtime_api.h>

namespace ctrun::comm::nccl {

cudaStream_t current_stream();
void set_current_stream(cudaStream_t stream);

// Sets the current stream for a scope and restores the previous one.
class StreamGuard {
 public:
  explicit StreamGuard(cudaStream_t stream) : previous_(current_stream()) { set_current_stream(stream); }
  ~StreamGuard() { set_current_stream(previous_); }
  StreamGuard(const StreamGuard&) = delete;
  StreamGuard& operator=(const StreamGuard&) = delete;

 private:
  cudaStream_t previous_;
};

}  // namespace ctrun::comm::nccl
