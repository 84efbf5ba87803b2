#include "agent/cluster/slurm_env.hpp"

#include <charconv>
#include <regex>

#include "agent/cluster/hostlist.hpp"
#include "common/text.hpp"

namespace ctrun::agent::cluster {
namespace {

std::optional<long long> number(const std::optional<std::string>& text) {
  if (!text) return std::nullopt;
  return text::parse_int<long long>(*text);
}

// The first variable of `names` that is set: {name, value}.
std::optional<std::pair<std::string, std::string>> first_of(const EnvLookup& env,
                                                            std::initializer_list<const char*> names) {
  for (const char* n : names) {
    if (auto v = env(n); v && !v->empty()) return std::make_pair(std::string(n), *v);
  }
  return std::nullopt;
}

}  // namespace

std::optional<DerivedDefaults> derive_slurm(const EnvLookup& env, const GivenLookup& given) {
  auto job = env("SLURM_JOB_ID");
  if (!job || job->empty()) job = env("SLURM_JOBID");
  if (!job || job->empty()) return std::nullopt;
  auto step = env("SLURM_STEP_ID");
  if (!step || step->empty()) step = env("SLURM_STEPID");
  auto node_id = env("SLURM_NODEID");
  auto nodes = first_of(env, {"SLURM_STEP_NUM_NODES", "SLURM_NNODES", "SLURM_JOB_NUM_NODES"});

  DerivedDefaults d;
  // The batch script (or salloc's shell) is not a step: one ctrun there is one node of a possibly larger job.
  const bool in_step = step && number(step) && *number(step) < 0xfffffff0LL && node_id;
  if (!in_step) {
    if (nodes && number(nodes->second).value_or(1) > 1) {
      d.source = "Slurm job " + *job;
      d.notes.push_back("not inside an srun step, so nothing is derived for " + nodes->second +
                        " nodes: start one agent per node with `srun --ntasks-per-node=1 ctrun ...`");
      return d;
    }
    return std::nullopt;
  }
  d.source = "Slurm job " + *job + " step " + *step;

  // One agent per node: several tasks on a node would be several nodes with one node rank.
  if (auto tpn = env("SLURM_STEP_TASKS_PER_NODE"); tpn && !tpn->empty()) {
    static const std::regex one("^1(\\(x[0-9]+\\))?$");
    if (!std::regex_match(*tpn, one)) {
      throw ClusterEnvError("srun started " + *tpn + " ctrun tasks per node (SLURM_STEP_TASKS_PER_NODE); ctrun is " +
                            "one agent per node: use `srun --ntasks-per-node=1 ctrun ...` (or --no-slurm)");
    }
  }

  if (nodes) d.derive(given, "nnodes", nodes->second, nodes->first);
  d.derive(given, "node_rank", *node_id, "SLURM_NODEID");
  d.derive(given, "rdzv_id", *job + "." + *step, "SLURM_JOB_ID.SLURM_STEP_ID");

  auto list = first_of(env, {"SLURM_STEP_NODELIST", "SLURM_NODELIST", "SLURM_JOB_NODELIST"});
  std::optional<std::string> host;
  if (list) {
    try {
      host = first_host(list->second);
    } catch (const std::invalid_argument& e) {
      throw ClusterEnvError(std::string(e.what()) + " (" + list->first + "); pass --master-addr or --no-slurm");
    }
  }
  long long job_number = number(job).value_or(0);
  std::string port = std::to_string(15000 + job_number % 10000);
  const std::string port_from = "15000 + last 4 digits of SLURM_JOB_ID";
  const bool endpoint_given = given("rdzv_endpoint").has_value();
  if (host && !endpoint_given) {
    const std::string host_from = "first host of " + list->first + "=" + list->second;
    if (given("rdzv_backend").value_or("static") == "c10d") {
      d.derive(given, "rdzv_endpoint", *host + ":" + (given("master_port") ? *given("master_port") : port),
               host_from + ", " + port_from);
    } else {
      d.derive(given, "master_addr", *host, host_from);
      d.derive(given, "master_port", port, port_from);
    }
  }

  if (auto gpus = number(env("SLURM_GPUS_ON_NODE")); gpus && *gpus > 0) {
    d.derive(given, "nproc_per_node", std::to_string(*gpus), "SLURM_GPUS_ON_NODE");
  } else if (auto cpt = number(env("SLURM_CPUS_PER_TASK")); cpt && *cpt > 0) {
    d.derive(given, "nproc_per_node", std::to_string(*cpt), "SLURM_CPUS_PER_TASK");
  } else if (auto con = number(env("SLURM_CPUS_ON_NODE")); con && *con > 0) {
    d.derive(given, "nproc_per_node", std::to_string(*con), "SLURM_CPUS_ON_NODE");
  }
  if (auto rc = number(env("SLURM_RESTART_COUNT")); rc && *rc > 0) {
    d.initial_restart_count = DerivedValue{std::to_string(*rc), "SLURM_RESTART_COUNT"};
  }
  return d;
}

}  // namespace ctrun::agent::cluster
