#pragma once
// ctbench's --backend nccl path: the same ops and sizes as measure(), on CUDA device buffers (CUDA builds only).

#include <string>

#include "comm/process_group.hpp"
#include "measure.hpp"

namespace ctrun::bench {

// Like measure(), but the buffers live on the group's GPU and the timed loop ends with a device synchronisation
// (ops only make the caller's stream wait). Throws UnsupportedError in builds without CUDA.
Row measure_nccl(comm::ProcessGroup& pg, const std::string& op, std::size_t bytes, int iters, int warmup);

}  // namespace ctrun::bench
