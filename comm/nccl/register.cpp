// Registers the CUDA backends with comm's registry when a program linking ctrun_comm_nccl starts:
//   "nccl"  the NCCL backend (comm/nccl/nccl_backend.hpp);
//   "cpu"   the host backend registered before, wrapped so its ops also take CUDA buffers (staged via pinned memory).
// The linker keeps this file because ctrun_comm_nccl asks for ctrun_comm_nccl_registered (comm/nccl/CMakeLists.txt).
#include <utility>

#include "comm/backend.hpp"
#include "comm/nccl/nccl_backend.hpp"
#include "comm/nccl/staging.hpp"

namespace ctrun::comm::nccl {
namespace {

int register_cuda_backends() {
  register_backend("nccl", [](BackendContext ctx) { return make_nccl_backend(std::move(ctx)); });
  BackendFactory host = backend_factory("cpu");
  register_backend("cpu", [host](BackendContext ctx) { return make_cuda_staging_backend(std::move(ctx), host); });
  return 1;
}

}  // namespace
}  // namespace ctrun::comm::nccl

// Non-zero once the backends are registered (dynamic initialisation, before main).
extern "C" __attribute__((visibility("default"))) const int ctrun_comm_nccl_registered =
    ctrun::comm::nccl::register_cuda_backends();
