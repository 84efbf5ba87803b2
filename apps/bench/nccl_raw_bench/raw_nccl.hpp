#pragma once
// The baseline: one NCCL communicator and stream per rank, calling the collectives directly, as a hand-written
// NCCL program would (no events, no watchdog, no argument checks).

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <string>

namespace ctrun::bench {

class RawNccl {
 public:
  RawNccl(int rank, int size, const ncclUniqueId& id, int device);
  ~RawNccl();
  RawNccl(const RawNccl&) = delete;
  RawNccl& operator=(const RawNccl&) = delete;

  // Enqueues one op on float32 buffers with the same layout ctbench uses (a: input/in-place, b: gathered or
  // reduced output); `count` is per-rank elements for the gathers, the buffer length otherwise.
  void enqueue(const std::string& op, void* a, void* b, std::size_t count);
  void synchronize();

 private:
  ncclComm_t comm_ = nullptr;
  cudaStream_t stream_ = nullptr;
};

}  // namespace ctrun::bench
