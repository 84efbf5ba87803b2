#pragma once
// --nproc-per-node cpu|gpu|auto without linking CUDA into ctrun: GPUs counted as agent/base/gpus.hpp does.

#include <optional>
#include <string>

#include "agent/base/command_line.hpp"
#include "agent/base/gpus.hpp"

namespace ctrun::agent {

// Resolves spec ("4", "cpu", "gpu", "auto"). Throws UsageError for gpu on a machine without GPUs.
// Logs torchrun's "Using nproc_per_node=..." line for the symbolic choices.
int resolve_nproc_per_node(const std::string& spec, const EnvLookup& env);

}  // namespace ctrun::agent
