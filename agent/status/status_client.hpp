#pragma once
// `ctrun --status [--json | --stacks] [LOG_DIR | RUN_DIR | HOST:PORT]`: print a running job's live table
// (docs/hang.md), the text of GET / or, with --json, GET /status.json from the agent's StatusServer; with --stacks,
// GET /stacks: every local rank's Python stack, dumped on request. The agent writes its port into
// <run dir>/status_port and removes it when it ends; without a target ctrun looks in the default log base
// ($TMPDIR or /tmp, torchelastic_*/), newest run first, and asks each until one answers.

#include <optional>
#include <string>
#include <vector>

#include "agent/base/command_line.hpp"

namespace ctrun::agent {

struct StatusTarget {
  std::string host;
  int port = 0;
  std::string source;  // the status_port file it came from, or the HOST:PORT given
};

// Where to ask, in order (newest run first). Throws UsageError for a target that is neither an existing directory
// nor HOST:PORT.
std::vector<StatusTarget> status_targets(const std::optional<std::string>& target, const std::string& tmpdir);

// argv after "--status"; prints the table (stdout) or what failed (stderr). Returns 0, 1 (no running job
// answered) or 2 (a bad command line).
int status_main(const std::vector<std::string>& args, const EnvLookup& env);

}  // namespace ctrun::agent
