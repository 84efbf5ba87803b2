#pragma once
// Where each worker stream goes, from -r/--redirects, -t/--tee and --local-ranks-filter (torchrun's rules):
// tee = file + prefixed console; redirect = file only; otherwise the console as-is, or /dev/null for ranks
// the filter hides. Files only exist when logging is enabled (not --log-dir /dev/null).

#include "agent/base/launch_config.hpp"

namespace ctrun::agent {

enum class StreamMode {
  kInherit,  // the worker writes to ctrun's own stdout/stderr
  kNull,     // hidden by --local-ranks-filter
  kFile,     // redirected to the rank's log file
  kTee,      // a pipe ctrun reads: file (if enabled) and, if the filter allows, the prefixed console
};

struct StreamPlan {
  StreamMode mode = StreamMode::kInherit;
  bool to_console = true;  // for kTee: whether lines also reach the console
};

// stream: 1 stdout, 2 stderr.
StreamPlan plan_stream(const LaunchConfig& config, int local_rank, int stream);

bool rank_on_console(const LaunchConfig& config, int local_rank);

}  // namespace ctrun::agent
