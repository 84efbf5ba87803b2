#pragma once
// Factories of comm's CUDA backends. CUDA-free on purpose: comm/backend_registry.cpp includes it, and nothing
// outside comm/nccl sees a CUDA or NCCL header.

#include <memory>

#include "comm/backend.hpp"

namespace ctrun::comm::nccl {

// The "nccl" backend: CUDA device buffers, one NCCL communicator per group; host buffers are staged through the
// group's GPU (slower: synchronous upload, allocation per op). Throws UnsupportedError naming the
// reason when no CUDA GPU is usable here, TimeoutError when the other ranks do not join within the timeout.
// Device: env CTRUN_COMM_DEVICE if set, else the thread's current device if it is not 0 (cudaSetDevice was
// called), else LOCAL_RANK % device count (torchrun's one GPU per local rank), else 0.
std::unique_ptr<Backend> make_nccl_backend(BackendContext context);

// The CUDA device an nccl backend runs on (where its buffers must live); -1 for other backends.
int device_of(Backend& backend);

// (The staging factory of host backends is in comm/nccl/staging.hpp.)

}  // namespace ctrun::comm::nccl
