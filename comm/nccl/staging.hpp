#pragma once
// The staging factory, CUDA-free (comm/nccl/register.cpp includes it; the class is in staging_backend.hpp).

#include <memory>

#include "comm/backend.hpp"

namespace ctrun::comm::nccl {

// Wraps a host backend (e.g. "cpu") so its ops also accept CUDA buffers: they are copied through pinned host
// memory (after the caller's current stream) and copied back when the op finished. Buffers already on the host
// go straight through.
std::unique_ptr<Backend> make_cuda_staging_backend(BackendContext context, const BackendFactory& make_host_backend);

}  // namespace ctrun::comm::nccl
