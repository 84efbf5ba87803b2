#pragma once
// What the built-in checks (node_checks.hpp) read, worked out in one place from the launch config, the agent's
// environment, the run's log directory and what the job's checkpoints hold already. On the loop (cheap: no file
// system access); the checks themselves run on the helper lane.

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "agent/base/command_line.hpp"
#include "agent/base/launch_config.hpp"
#include "agent/health/node_checks.hpp"

namespace ctrun::agent {

// nullopt with --no-builtin-health-checks. `log_dir`: the run's log directory ("" when logs go to the console only);
// `checkpoint_held`: bytes the job's checkpoints hold in /dev/shm (asked only with an explicit --checkpoint-memory).
std::optional<NodeCheckContext> node_check_context(const LaunchConfig& config, const EnvLookup& env,
                                                   const std::string& log_dir,
                                                   const std::function<std::uint64_t()>& checkpoint_held);

}  // namespace ctrun::agent
