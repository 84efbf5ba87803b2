#pragma once
// --nproc-per-node cpu|gpu|auto without linking CUDA into ctrun: GPUs are counted from the driver's
// /proc/driver/nvidia/gpus/ entries, then narrowed by CUDA_VISIBLE_DEVICES the way the CUDA runtime does.

#include <optional>
#include <string>

#include "agent/base/command_line.hpp"

namespace ctrun::agent {

// Number of GPUs a CUDA program started with this environment would see.
int visible_gpu_count(const EnvLookup& env, const std::string& proc_gpus_dir = "/proc/driver/nvidia/gpus");

// CUDA_VISIBLE_DEVICES semantics: entries up to the first invalid one count; integers must be < physical.
int apply_cuda_visible_devices(int physical, const std::optional<std::string>& cvd);

// Resolves spec ("4", "cpu", "gpu", "auto"). Throws UsageError for gpu on a machine without GPUs.
// Logs torchrun's "Using nproc_per_node=..." line for the symbolic choices.
int resolve_nproc_per_node(const std::string& spec, const EnvLookup& env);

}  // namespace ctrun::agent
