#include "comm/nccl/cuda_check.hpp"

#include <string>

namespace ctrun::comm::nccl {

void throw_cuda(cudaError_t err, std::string_view what) {
  std::string msg = std::string(what) + " failed: " + cudaGetErrorName(err) + " (" + cudaGetErrorString(err) + ")";
  switch (err) {
    case cudaErrorNoDevice:
    case cudaErrorInsufficientDriver:
    case cudaErrorInvalidDevice:
#if CUDART_VERSION >= 12000
    case cudaErrorCallRequiresNewerDriver:
#endif
      throw UnsupportedError(msg + "; this machine has no usable CUDA GPU or NVIDIA driver");
    default:
      throw CommError(msg);
  }
}

void throw_nccl(ncclResult_t result, std::string_view what, ncclComm_t comm) {
  std::string msg = std::string(what) + " failed: " + ncclGetErrorString(result);
  if (const char* last = ncclGetLastError(comm); last != nullptr && *last != '\0') msg += std::string(": ") + last;
  switch (result) {
    case ncclRemoteError:
    case ncclSystemError:
      throw PeerError(msg + " (a peer failed or the network broke; the communicator is unusable)");
    case ncclInvalidArgument:
    case ncclInvalidUsage:
      throw InvalidArgumentError(msg);
    default:
      throw CommError(msg);
  }
}

ncclDataType_t to_nccl(DataType dtype) {
  switch (dtype) {
    case DataType::kFloat32:
      return ncclFloat32;
    case DataType::kFloat64:
      return ncclFloat64;
    case DataType::kFloat16:
      return ncclFloat16;
    case DataType::kBFloat16:
      return ncclBfloat16;
    case DataType::kInt8:
      return ncclInt8;
    case DataType::kUInt8:
      return ncclUint8;
    case DataType::kInt32:
      return ncclInt32;
    case DataType::kInt64:
      return ncclInt64;
  }
  throw InvalidArgumentError("unknown dtype " + std::to_string(static_cast<int>(dtype)));
}

ncclRedOp_t to_nccl(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return ncclSum;
    case ReduceOp::kProduct:
      return ncclProd;
    case ReduceOp::kMin:
      return ncclMin;
    case ReduceOp::kMax:
      return ncclMax;
    // ncclAvg divides after summing (integers: truncating), matching comm's documented AVG.
    case ReduceOp::kAvg:
      return ncclAvg;
    case ReduceOp::kBand:
    case ReduceOp::kBor:
    case ReduceOp::kBxor:
      throw UnsupportedError("reduce op " + std::string(to_string(op)) +
                             " is not available with the nccl backend (NCCL has no bitwise reductions); "
                             "use the cpu backend for it");
  }
  throw InvalidArgumentError("unknown reduce op " + std::to_string(static_cast<int>(op)));
}

DeviceGuard::DeviceGuard(int device) {
  cuda_check(cudaGetDevice(&previous_), "cudaGetDevice");
  if (previous_ != device) {
    cuda_check(cudaSetDevice(device), "cudaSetDevice(" + std::to_string(device) + ")");
  } else {
    previous_ = -1;  // nothing to restore
  }
}

DeviceGuard::~DeviceGuard() {
  if (previous_ >= 0) cudaSetDevice(previous_);  // best effort: a destructor must not throw
}

}  // namespace ctrun::comm::nccl
