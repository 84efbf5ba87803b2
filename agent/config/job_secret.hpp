#pragma once
// Where a job's secret comes from (docs/security.md), in this order: --secret-file PATH (or PET_SECRET_FILE; "-"
// reads the first line of stdin, which is how the --hostfile launcher hands each host the job's secret), --rdzv-conf
// secret_file=PATH, $CTRUN_SECRET. Whatever the source, CTRUN_SECRET is then removed from this process's
// environment, so that no worker, health check or warm process inherits it.

#include <memory>
#include <string>

#include "agent/base/command_line.hpp"
#include "agent/base/launch_config.hpp"

namespace ctrun::agent {

// Fills config.secret from the sources above (none: stays null) and loads the crypto module, so that a missing
// module or an unreadable or short secret is an error before anything starts. Throws UsageError saying which source
// and why. Warns (once) when the secret file can be read by other users. Call before any thread starts
// (unsetenv).
void resolve_job_secret(LaunchConfig& config, const EnvLookup& env);

// The secret of a --hostfile/--hosts launch: the user's (the sources above) or, with none, a fresh one.
std::shared_ptr<const auth::Secret> launcher_secret(LaunchConfig& config, const EnvLookup& env);

// The first line of `fd` (without its newline): read a byte at a time, so that nothing after it is taken from the
// stream (ssh's stdin goes on to signal the launcher's end), at most 4 KiB, within `timeout_s`. Throws UsageError.
std::string read_secret_line(int fd, double timeout_s);

// A multi-node job without a secret: the warning, said once at start, naming the doors that stay open and how to
// close them. "" when there is nothing to say (one node, or a secret).
std::string open_doors_warning(const LaunchConfig& config);

}  // namespace ctrun::agent
