#pragma once
// The end of a job whose workers failed with no restarts left: torchrun's ChildFailedError summary on stderr
// (agent/report/failure.hpp), a SIGPIPE death named as a write error, the hint about @record, which python has torch
// when workers lacked it (agent/report/missing_torch.hpp), and ctrun's own error file when TORCHELASTIC_ERROR_FILE asks
// for one.

#include <optional>
#include <string>
#include <vector>

#include "agent/base/command_line.hpp"
#include "agent/base/launch_config.hpp"
#include "agent/process/worker_group.hpp"

namespace ctrun::agent {

class EventLog;

// Reports the attempt's failed workers (those ctrun stopped count only if they wrote an error file), then the
// stragglers seen in the job (hang detection's last report per group), then `resume`: from which step of the
// in-memory checkpoints the job could have resumed (agent/checkpoint/keeper.hpp), then the nodes stepped out of the
// job for failing (`stepped_out`: the reasons their rounds ended with). Returns the exit code (1, or the
// root cause's with --propagate-exit-code), or nullopt when no worker failed.
std::optional<int> report_worker_failures(const std::vector<Worker>& workers, const LaunchConfig& config,
                                          const EnvLookup& env, EventLog& events,
                                          const std::vector<std::string>& stragglers = {},
                                          const std::optional<std::string>& resume = std::nullopt,
                                          const std::vector<std::string>& stepped_out = {});

}  // namespace ctrun::agent
