#include "agent/config/dry_run.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "agent/launch/rendezvous_factory.hpp"
#include "agent/launch/worker_invocation.hpp"
#include "rendezvous/records.hpp"

namespace ctrun::agent {
namespace {

std::string quoted(const std::string& word) {
  if (!word.empty() && word.find_first_of(" \t\n'\"\\$`*?[]{}();&|<>!#~") == std::string::npos) return word;
  std::string out = "'";
  for (char ch : word) {
    if (ch == '\'') {
      out.append("'\\''");
    } else {
      out.push_back(ch);
    }
  }
  out.push_back('\'');
  return out;
}

}  // namespace

std::string dry_run_report(const LaunchConfig& c, const EnvLookup& env) {
  const bool single = is_single_node(c);
  rdzv::Assignment a;  // the round assumed from the flags
  a.group_rank = single ? 0 : c.rdzv.node_rank;
  a.group_world_size = single ? 1 : c.rdzv.min_nodes;
  a.base_global_rank = a.base_role_rank = a.group_rank * c.workers.nproc_per_node;
  a.global_world_size = a.role_world_size = a.group_world_size * c.workers.nproc_per_node;
  a.master_addr =
      single ? c.rdzv.local_addr.value_or(c.rdzv.standalone ? "127.0.0.1" : c.rdzv.master_addr) : c.rdzv.master_addr;
  a.master_port = static_cast<std::uint16_t>(c.rdzv.master_port.value_or(0));
  if (c.rdzv.backend == rdzv::Backend::kStatic && !c.rdzv.standalone && !c.rdzv.endpoint.empty()) {
    const auto ep = rdzv::static_endpoint(rendezvous_parameters(c));  // as the agent: the endpoint wins
    a.master_addr = ep.host;
    a.master_port = ep.port;
  }
  const rdzv::RoundInfo round = rdzv::round_info(a);

  std::string out = "ctrun --dry-run: nothing is started\n";
  out += fmt::format("  nnodes={}:{} nproc_per_node={} rdzv_backend={} rdzv_endpoint={} rdzv_id={} standalone={}\n",
                     c.rdzv.min_nodes, c.rdzv.max_nodes, c.workers.nproc_per_node, rdzv::backend_name(c.rdzv.backend),
                     c.rdzv.endpoint.empty() ? "(none)" : c.rdzv.endpoint, c.rdzv.id, c.rdzv.standalone ? 1 : 0);
  out += fmt::format("  max_restarts={} shutdown_timeout={} s exit_barrier_timeout={} s signals_to_handle={}\n",
                     c.restarts.max_restarts, c.shutdown.timeout, c.shutdown.exit_barrier_timeout,
                     c.shutdown.signals_to_handle);
  out += fmt::format("  log_dir={} node_rank={} master_addr={} master_port={}\n", c.logs.dir.value_or("(none)"),
                     c.rdzv.node_rank, c.rdzv.master_addr,
                     c.rdzv.master_port ? std::to_string(*c.rdzv.master_port) : "(ephemeral)");
  if (!c.workers.preload.empty()) {
    out += fmt::format("  preload={} (each worker is forked from a warm process that imported them)\n",
                       fmt::join(c.workers.preload, ","));
  }
  if (!single) {
    out += fmt::format(
        "  (multi-node: RANK, GROUP_RANK, WORLD_SIZE and MASTER_ADDR/PORT below assume this node is group rank {} "
        "of {}; the rendezvous decides)\n",
        round.group_rank, round.group_world_size);
  } else if (round.master_port == 0) {
    out += "  (MASTER_PORT=0 below: the agent's store takes a free port when it starts)\n";
  }
  for (int r = 0; r < c.workers.nproc_per_node; ++r) {
    WorkerEnvInput in;
    in.config = &c;
    in.round = &round;
    in.run_id = c.rdzv.id;
    in.use_agent_store = true;
    in.local_rank = r;
    in.error_file = "(per attempt, under the log dir)";
    out += fmt::format("local_rank {}:\n  command:", r);
    for (const auto& w : worker_argv(c, r, env)) out += fmt::format(" {}", quoted(w));
    out += "\n  environment (on top of ctrun's own):\n";
    for (const auto& [k, v] : worker_env_overrides(in, env)) out += fmt::format("    {}={}\n", k, quoted(v));
  }
  return out;
}

}  // namespace ctrun::agent
