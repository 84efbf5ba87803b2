#pragma once
// CUDA/NCCL error handling and the type mappings of the nccl backend. Internal to comm/nccl (includes the CUDA
// and NCCL headers, which the rest of comm never sees).

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <string_view>

#include "comm/types.hpp"

namespace ctrun::comm::nccl {

// Throws the comm error that fits `err`: UnsupportedError when there is no usable GPU or driver (so callers can
// tell "wrong machine" from "broken op"), CommError otherwise. `what` names the call.
[[noreturn]] void throw_cuda(cudaError_t err, std::string_view what);
inline void cuda_check(cudaError_t err, std::string_view what) {
  if (err != cudaSuccess) throw_cuda(err, what);
}

// ncclRemoteError/ncclSystemError -> PeerError (a peer or the network failed), ncclInvalidArgument/
// ncclInvalidUsage -> InvalidArgumentError, everything else CommError. Adds ncclGetLastError(comm).
[[noreturn]] void throw_nccl(ncclResult_t result, std::string_view what, ncclComm_t comm = nullptr);

// NCCL has every comm dtype; bitwise reductions have no NCCL equivalent (UnsupportedError, as torch's NCCL PG).
ncclDataType_t to_nccl(DataType dtype);
ncclRedOp_t to_nccl(ReduceOp op);

// Makes `device` current for this thread's CUDA calls and restores the previous one: every backend call runs on
// the group's device whatever the caller's thread has selected.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device);
  ~DeviceGuard();
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = -1;
};

}  // namespace ctrun::comm::nccl
