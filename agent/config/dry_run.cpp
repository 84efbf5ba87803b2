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
  a.group_rank = single ? 0 : c.node_rank;
  a.group_world_size = single ? 1 : c.min_nodes;
  a.base_global_rank = a.base_role_rank = a.group_rank * c.nproc_per_node;
  a.global_world_size = a.role_world_size = a.group_world_size * c.nproc_per_node;
  a.master_addr = single ? c.local_addr.value_or(c.standalone ? "127.0.0.1" : c.master_addr) : c.master_addr;
  a.master_port = static_cast<std::uint16_t>(c.master_port.value_or(0));
  if (c.rdzv_backend == rdzv::Backend::kStatic && !c.standalone && !c.rdzv_endpoint.empty()) {
    const auto ep = rdzv::static_endpoint(rendezvous_parameters(c));  // as the agent: the endpoint wins
    a.master_addr = ep.host;
    a.master_port = ep.port;
  }
  const rdzv::RoundInfo round = rdzv::round_info(a);

  std::string out = "ctrun --dry-run: nothing is started\n";
  out += fmt::format("  nnodes={}:{} nproc_per_node={} rdzv_backend={} rdzv_endpoint={} rdzv_id={} standalone={}\n",
                     c.min_nodes, c.max_nodes, c.nproc_per_node, rdzv::backend_name(c.rdzv_backend),
                     c.rdzv_endpoint.empty() ? "(none)" : c.rdzv_endpoint, c.rdzv_id, c.standalone ? 1 : 0);
  out += fmt::format("  max_restarts={} shutdown_timeout={} s exit_barrier_timeout={} s signals_to_handle={}\n",
                     c.max_restarts, c.shutdown_timeout, c.exit_barrier_timeout, c.signals_to_handle);
  out += fmt::format("  log_dir={} node_rank={} master_addr={} master_port={}\n", c.log_dir.value_or("(none)"),
                     c.node_rank, c.master_addr, c.master_port ? std::to_string(*c.master_port) : "(ephemeral)");
  if (!c.preload.empty()) {
    out += fmt::format("  preload={} (each worker is forked from a warm process that imported them)\n",
                       fmt::join(c.preload, ","));
  }
  if (!single) {
    out += fmt::format(
        "  (multi-node: RANK, GROUP_RANK, WORLD_SIZE and MASTER_ADDR/PORT below assume this node is group rank {} "
        "of {}; the rendezvous decides)\n",
        round.group_rank, round.group_world_size);
  } else if (round.master_port == 0) {
    out += "  (MASTER_PORT=0 below: the agent's store takes a free port when it starts)\n";
  }
  for (int r = 0; r < c.nproc_per_node; ++r) {
    WorkerEnvInput in;
    in.config = &c;
    in.round = &round;
    in.run_id = c.rdzv_id;
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
