#include "agent/preload/preload_plan.hpp"

#include "agent/launch/worker_invocation.hpp"
#include "agent/preload/job_wide_env.hpp"
#include "common/worker_env.hpp"

namespace ctrun::agent::preload {

std::variant<WarmOptions, std::string> plan_warm_process(const LaunchConfig& config,
                                                         const std::vector<std::string>& modules, const EnvLookup& env,
                                                         char** parent) {
  if (config.workers.no_python && !config.workers.run_path)
    return std::string("the workers are not Python programs (--no-python)");
  WarmOptions o;
  o.modules = modules;
  o.worker_argv = worker_argv(config, 0, env);
  // Rank 0's variables of a placeholder round: only the job-wide ones are kept, and none depends on the round.
  const rdzv::RoundInfo round;
  WorkerEnvInput in;
  in.config = &config;
  in.round = &round;
  std::map<std::string, std::string> common;
  try {
    for (auto& [k, v] : worker_env_overrides(in, env)) {
      if (is_job_wide_variable(k)) common[k] = v;
    }
  } catch (const std::invalid_argument& e) {  // --virtual-local-rank without devices: the spawn says it
    return std::string(e.what());
  }
  // The workers record the end of their program (agent/teardown/): an empty name tells ctrun's sitecustomize in the
  // warm process to set up what its forked workers note on the way (their SystemExit) before the modules import.
  if (!config.workers.fail_on_teardown_crash) common[worker_env::kExitRecord] = "";
  o.env = merge_environment(parent, common);
  return o;
}

std::optional<std::string> why_cold(const WarmProcess& warm, const std::vector<std::string>& argv,
                                    const std::vector<std::string>& env) {
  if (warm.state() == WarmProcess::State::kLost) return "the warm process " + warm.lost_reason();
  if (warm.state() != WarmProcess::State::kReady) return std::string("the warm process is still importing");
  if (argv.empty() || argv[0] != warm.interpreter())
    return "this rank runs another interpreter (" + (argv.empty() ? std::string("none") : argv[0]) + ")";
  if (auto d = job_wide_difference(warm.env(), env)) return "a job-wide variable differs: " + *d;
  return std::nullopt;
}

}  // namespace ctrun::agent::preload
