#pragma once
// The environment and command of each worker, computed exactly as torchrun's LocalElasticAgent does
// (torch/distributed/elastic/agent/server/local_elastic_agent.py, _start_workers). Pure functions of the config, the round and the parent environment.

#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "agent/base/command_line.hpp"
#include "agent/base/launch_config.hpp"
#include "rendezvous/handler.hpp"

namespace ctrun::agent {

struct WorkerEnvInput {
  const LaunchConfig* config = nullptr;
  const rdzv::RoundInfo* round = nullptr;
  std::string run_id;
  bool use_agent_store = false;
  int local_rank = 0;
  int restart_count = 0;
  std::string error_file;  // TORCHELASTIC_ERROR_FILE
};

// The variables ctrun sets on top of the inherited environment. Throws std::invalid_argument for
// --virtual-local-rank with fewer CUDA_VISIBLE_DEVICES entries than local ranks (as torchrun).
// Also prepends ctrun's python directories to PYTHONPATH (python_dirs()).
std::map<std::string, std::string> worker_env_overrides(const WorkerEnvInput& in, const EnvLookup& parent_env);

// The directory of comm's torch.distributed backend module (ctrun_torch*.so) in a build tree: <exe>/../python.
std::optional<std::string> torch_module_dir();

// The directory holding ctrun's stack-dump sitecustomize.py (agent/hang/stacks.hpp): <exe>/../python (a build
// tree) or <exe>/../share/ctrun/python (installed); nullopt when neither has it (no stack dumps then).
std::optional<std::string> sitecustomize_dir();

// What every worker gets first on PYTHONPATH, in one place so that the warm process of --preload (which takes the
// job's common environment from here) sees the same: torch_module_dir() and the directory of ctrun's stack-dump
// sitecustomize (agent/hang/stacks.hpp), each once. ":"-joined; empty when there is neither.
std::string python_dirs();

// argv of a worker: [PYTHON, -u, (-m), SCRIPT, args...] (PYTHON: agent/launch/worker_python.hpp), or [SCRIPT, args...]
// with --no-python, with torchrun's ${local_rank} macro substituted in the script arguments.
std::vector<std::string> worker_argv(const LaunchConfig& config, int local_rank, const EnvLookup& parent_env);

// The name torchrun's summary uses as its title: the script or module name, or the binary.
std::string entrypoint_name(const LaunchConfig& config);

// parent environ + overrides, as "K=V" strings for execve.
std::vector<std::string> merge_environment(char** parent, const std::map<std::string, std::string>& overrides);

}  // namespace ctrun::agent
