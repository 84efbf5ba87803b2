#include "agent/report/missing_torch.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <thread>

#include "agent/launch/worker_python.hpp"
#include "agent/process/worker_process.hpp"
#include "common/text.hpp"

extern char** environ;

namespace ctrun::agent {
namespace {

constexpr std::streamoff kTailBytes = 8192;  // the last lines of stderr hold the traceback's final line

std::string tail_of(const std::string& path) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) return "";
  const std::streamoff size = in.tellg();
  in.seekg(size > kTailBytes ? size - kTailBytes : 0);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

std::string on_path(const std::string& name, const EnvLookup& env) {
  auto path = env("PATH");
  try {
    return resolve_program(name, path ? std::vector<std::string>{"PATH=" + *path} : std::vector<std::string>{});
  } catch (const SpawnError&) {
    return "";
  }
}

}  // namespace

bool says_no_torch(const std::string& text) { return text.find("No module named 'torch'") != std::string::npos; }

TorchEvidence missing_torch_evidence(const std::vector<WorkerFailure>& failures,
                                     const std::vector<std::string>& captured) {
  bool exited_1 = false, other_cause = false;
  for (std::size_t i = 0; i < failures.size(); ++i) {
    const std::string& text = i < captured.size() ? captured[i] : "";
    if (says_no_torch(text)) return TorchEvidence::kSeen;
    if (failures[i].exitcode != 1) continue;  // python's exit code for an uncaught exception
    exited_1 = true;
    if (!text.empty()) other_cause = true;
  }
  return exited_1 && !other_cause ? TorchEvidence::kUncaptured : TorchEvidence::kNone;
}

std::optional<std::string> format_missing_torch_hint(TorchEvidence evidence, const std::string& workers,
                                                     const std::string& source,
                                                     const std::vector<PythonProbe>& probes) {
  if (evidence == TorchEvidence::kNone) return std::nullopt;
  std::optional<bool> workers_have;
  std::vector<std::string> with, without;
  for (const auto& p : probes) {
    if (p.python == workers) {
      workers_have = p.has_torch;
    } else if (p.has_torch.value_or(false)) {
      with.push_back(p.python);
    } else if (p.has_torch) {
      without.push_back(p.python);
    }
  }
  // Unseen, the hint is a guess: give it only when the workers' python surely lacks torch and another has it.
  if (evidence == TorchEvidence::kUncaptured && (workers_have.value_or(true) || with.empty())) return std::nullopt;
  std::string text = evidence == TorchEvidence::kSeen
                         ? "workers died of \"No module named 'torch'\": they ran " + workers + " (" + source + ")"
                         : "workers exited with code 1 and their output went to the console; they ran " + workers +
                               " (" + source + ")";
  text += workers_have == false ? ", which has no torch. " : ". ";
  if (!with.empty()) {
    text += with.front() + " has torch: run ctrun with PYTHON_EXEC=" + with.front() +
            ", or `pip install .` ctrun into the environment that has torch, whose ctrun then starts workers with "
            "its own python (docs/cli.md)";
    if (with.size() > 1) text += "; torch is also in " + text::join({with.begin() + 1, with.end()}, ", ");
  } else {
    text += "No other python found here has torch";
    if (!without.empty()) text += " (" + text::join(without, ", ") + ")";
    text += ": install torch for " + workers + ", or set PYTHON_EXEC to a python that has it";
  }
  return text;
}

std::vector<std::string> python_candidates(const std::string& workers, const EnvLookup& env) {
  std::vector<std::string> out;
  auto add = [&](const std::string& p) {
    if (p.empty() || ::access(p.c_str(), X_OK) != 0) return;
    for (const auto& o : out)
      if (o == p) return;  // by path, not resolved: a venv's python links to the interpreter it isolates
    out.push_back(p);
  };
  add(workers);
  add("/usr/bin/python3");
  add(on_path("python3", env));
  if (auto venv = env("VIRTUAL_ENV"); venv && !venv->empty()) add(*venv + "/bin/python3");
  if (auto conda = env("CONDA_PREFIX"); conda && !conda->empty()) add(*conda + "/bin/python");
  return out;
}

std::vector<PythonProbe> probe_torch(const std::vector<std::string>& pythons, std::chrono::milliseconds budget) {
  const auto deadline = std::chrono::steady_clock::now() + budget;
  std::vector<PythonProbe> out;
  std::vector<pid_t> pids;
  std::vector<std::string> env;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) env.emplace_back(*e);
  const int devnull = ::open("/dev/null", O_WRONLY | O_CLOEXEC);
  for (const auto& python : pythons) {
    out.push_back({python, std::nullopt});
    SpawnRequest req;
    req.argv = {python, "-c", "import importlib.util, sys; sys.exit(importlib.util.find_spec('torch') is None)"};
    req.env = env;
    req.stdout_fd = req.stderr_fd = devnull;
    try {
      pids.push_back(spawn_worker(req));
    } catch (const SpawnError&) {
      pids.push_back(-1);
    }
  }
  if (devnull >= 0) ::close(devnull);
  // pids[i] <= 0: answered, or never started.
  auto running = [&] { return std::any_of(pids.begin(), pids.end(), [](pid_t p) { return p > 0; }); };
  while (running() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    for (std::size_t i = 0; i < pids.size(); ++i) {
      int status = 0;
      if (pids[i] <= 0 || ::waitpid(pids[i], &status, WNOHANG) != pids[i]) continue;
      if (WIFEXITED(status) && WEXITSTATUS(status) <= 1) out[i].has_torch = WEXITSTATUS(status) == 0;
      pids[i] = 0;
    }
  }
  for (pid_t pid : pids) {
    if (pid <= 0) continue;
    signal_group(pid, SIGKILL);  // each leads its own process group (spawn_worker)
    ::waitpid(pid, nullptr, 0);
  }
  return out;
}

std::optional<std::string> missing_torch_hint(const std::vector<WorkerFailure>& failures,
                                              const std::vector<std::string>& stderr_logs, const LaunchConfig& config,
                                              const EnvLookup& env) {
  if (config.workers.no_python && !config.workers.run_path) return std::nullopt;
  const WorkerPython python = worker_python(env);
  if (python.from_python_exec) return std::nullopt;
  std::vector<std::string> captured;
  for (std::size_t i = 0; i < failures.size(); ++i) {
    // A failure without an error file has torchrun's placeholder as its message, not the worker's words.
    std::string text = failures[i].error_file != "<N/A>" ? failures[i].message : "";
    if (i < stderr_logs.size() && !stderr_logs[i].empty()) text += tail_of(stderr_logs[i]);
    captured.push_back(text);
  }
  const TorchEvidence evidence = missing_torch_evidence(failures, captured);
  if (evidence == TorchEvidence::kNone) return std::nullopt;
  std::string workers = python.program.find('/') == std::string::npos ? on_path(python.program, env) : python.program;
  if (workers.empty()) workers = python.program;
  return format_missing_torch_hint(evidence, workers, python.source,
                                   probe_torch(python_candidates(workers, env), kProbeBudget));
}

}  // namespace ctrun::agent
