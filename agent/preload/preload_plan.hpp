#pragma once
// The decisions of --preload that depend on the job, apart from the warm process itself (warm_process.hpp):
// what the warm process is started with, and whether a given rank may be forked from it or must start cold.

#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "agent/base/command_line.hpp"
#include "agent/base/launch_config.hpp"
#include "agent/preload/warm_process.hpp"

namespace ctrun::agent::preload {

// The warm process for this job: local rank 0's command, and the job's common environment: ctrun's own (`parent`,
// "K=V") plus what ctrun sets for every rank alike among the job-wide variables (job_wide_env.hpp: PYTHONPATH for
// ctrun_torch, TORCH_NCCL_ASYNC_ERROR_HANDLING, ...). Per-rank variables (RANK, ...) are set after the fork. A
// string instead says why this job cannot be preloaded (--no-python workers are not Python programs).
std::variant<WarmOptions, std::string> plan_warm_process(const LaunchConfig& config,
                                                         const std::vector<std::string>& modules, const EnvLookup& env,
                                                         char** parent);

// Why this rank (its command and whole environment) must start cold, or nullopt when it may be forked from
// `warm`: the warm process must be ready, run the rank's interpreter, and agree on every job-wide variable.
std::optional<std::string> why_cold(const WarmProcess& warm, const std::vector<std::string>& argv,
                                    const std::vector<std::string>& env);

}  // namespace ctrun::agent::preload
