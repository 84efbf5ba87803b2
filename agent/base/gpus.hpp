#pragma once
// The GPUs a CUDA program on this node would see, without linking CUDA into ctrun: counted from the driver's
// /proc/driver/nvidia/gpus/ entries, then narrowed by CUDA_VISIBLE_DEVICES the way the CUDA runtime does. Used by
// --nproc-per-node=gpu (agent/config/nproc) and by the built-in health check gpus_present (agent/health/node_checks).

#include <optional>
#include <string>

#include "agent/base/command_line.hpp"

namespace ctrun::agent {

// Number of GPUs a CUDA program started with this environment would see.
int visible_gpu_count(const EnvLookup& env, const std::string& proc_gpus_dir = "/proc/driver/nvidia/gpus");

// CUDA_VISIBLE_DEVICES semantics: entries up to the first invalid one count; integers must be < physical.
int apply_cuda_visible_devices(int physical, const std::optional<std::string>& cvd);

// How many devices CUDA_VISIBLE_DEVICES names (its comma-separated entries, whether present or not): what a job
// started with it expects to see. 0 when unset or blank.
int named_gpu_count(const std::optional<std::string>& cvd);

}  // namespace ctrun::agent
