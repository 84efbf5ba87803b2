#pragma once
// `ctrun --hostfile FILE ...` / `--hosts a,b,c`: one agent per host over ssh (the system's OpenSSH client in
// BatchMode, or --ssh), all with one run id and one rendezvous endpoint on the first host (c10d by default;
// `--rdzv-backend static` ranks the hosts in file order). Each host's output comes back line by line, prefixed
// `host: `; the launcher exits with the worst host's exit code. Ctrl-C, SIGTERM or the launcher's death closes
// every ssh's stdin, and the remote `--exit-on-stdin-close` wrapper stops its agent and workers. A host that
// cannot be reached (ssh exit 255) is named, and the others are stopped.

#include <string>
#include <vector>

#include "agent/base/command_line.hpp"
#include "agent/base/launch_config.hpp"
#include "agent/multihost/hostfile.hpp"
#include "agent/multihost/remote_command.hpp"

namespace ctrun::agent::multihost {

// Set in every remote agent's environment: such an agent never fans out again.
inline constexpr const char* kLaunchedMarker = "CTRUN_STARTED_BY_HOSTFILE";

struct HostLaunch {
  std::string host;
  std::vector<std::string> argv;  // the remote ctrun command
  EnvVars env;                    // set on that host
  int nproc = 0;                  // 0: the remote ctrun decides
};

// Pure: what runs where. `run_id` is used unless the user gave --rdzv-id. Throws UsageError.
std::vector<HostLaunch> plan_launch(const CommandLine& cli, const std::vector<Host>& hosts,
                                    const std::string& ctrun_path, const std::string& run_id, const EnvVars& exported);

// Runs the whole job; returns the launcher's exit code. Throws UsageError for a bad host list. Every host's agent
// gets the job's secret (the user's, else one made now) as the first line of its stdin (`--secret-file -`).
int run_multihost(LaunchConfig& config, const CommandLine& cli, const EnvLookup& env);

}  // namespace ctrun::agent::multihost
