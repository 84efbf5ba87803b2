#pragma once
// A newcomer's first `ctrun train.py` dies of `No module named 'torch'` because python3 on PATH
// is not the python that has torch. When workers failed that way and PYTHON_EXEC is unset, the failure summary
// is followed by a line saying which python ran them and which python on this machine has torch.
//
// The evidence is what the failed workers left: their error files' tracebacks and the tails of their stderr.log
// (with --redirects/--tee). Workers whose stderr went to the console left nothing: then the hint is given when
// the workers' python has no torch while another has, and says so. Pythons are asked with
// importlib.util.find_spec('torch') (it finds torch without importing it: tens of milliseconds where an import
// takes seconds), all at once, in at most kProbeBudget; the agent's workers are gone by then.

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "agent/base/command_line.hpp"
#include "agent/base/launch_config.hpp"
#include "agent/report/failure.hpp"

namespace ctrun::agent {

constexpr std::chrono::milliseconds kProbeBudget{1500};

// "No module named 'torch'" in a worker's traceback or stderr.
bool says_no_torch(const std::string& text);

enum class TorchEvidence {
  kNone,       // not this failure: no worker exited with 1, or what they left names another cause
  kSeen,       // a failed worker's traceback or stderr says "No module named 'torch'"
  kUncaptured  // workers exited with 1 and their stderr went to the console: ask the pythons
};

// captured[i]: what failed worker i left (traceback + stderr tail; "" for nothing), next to its failure.
TorchEvidence missing_torch_evidence(const std::vector<WorkerFailure>& failures,
                                     const std::vector<std::string>& captured);

struct PythonProbe {
  std::string python;             // a path
  std::optional<bool> has_torch;  // nullopt: no answer within the budget, or it could not be run
};

// The hint (one paragraph), or nullopt when there is nothing useful to say (the workers' python has torch, or
// did not answer, and nothing was seen). `workers` is the workers' python as resolved on PATH, `source` why it was
// chosen (agent/launch/worker_python.hpp); `probes` has the workers' python first.
std::optional<std::string> format_missing_torch_hint(TorchEvidence evidence, const std::string& workers,
                                                     const std::string& source, const std::vector<PythonProbe>& probes);

// The candidates, the workers' python first, each once: it, /usr/bin/python3, python3 on PATH, $VIRTUAL_ENV's and
// $CONDA_PREFIX's python. Those that do not exist are left out.
std::vector<std::string> python_candidates(const std::string& workers, const EnvLookup& env);

// Asks each python at once whether it has torch, within `budget` in all (stragglers are killed).
std::vector<PythonProbe> probe_torch(const std::vector<std::string>& pythons, std::chrono::milliseconds budget);

// Everything above for a failed job: nullopt unless the workers ran python with PYTHON_EXEC unset and the evidence
// and the probes call for the hint. stderr_logs[i]: failure i's stderr.log ("" or absent when not redirected).
std::optional<std::string> missing_torch_hint(const std::vector<WorkerFailure>& failures,
                                              const std::vector<std::string>& stderr_logs, const LaunchConfig& config,
                                              const EnvLookup& env);

}  // namespace ctrun::agent
