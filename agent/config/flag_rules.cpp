#include "agent/config/flag_rules.hpp"

#include "agent/base/command_line.hpp"

namespace ctrun::agent {
namespace {

using Complaint = std::optional<std::string>;
using rdzv::Backend;

// torchrun's own two checks of the worker command.
Complaint module_or_no_python(const LaunchConfig& c) {
  if (!(c.workers.module && c.workers.no_python)) return std::nullopt;
  return "Don't use both the '--no-python' flag and the '--module' flag at the same time.";
}

Complaint module_or_run_path(const LaunchConfig& c) {
  if (!(c.workers.run_path && c.workers.module)) return std::nullopt;
  return "Don't use both the '--run-path' flag and the '--module' flag.";
}

// As torchrun: the static backend has no elasticity, and the node rank picks one of exactly N places.
Complaint static_needs_fixed_nnodes(const LaunchConfig& c) {
  if (c.rdzv.backend != Backend::kStatic || c.rdzv.min_nodes == c.rdzv.max_nodes) return std::nullopt;
  return "argument --nnodes: '" + std::to_string(c.rdzv.min_nodes) + ":" + std::to_string(c.rdzv.max_nodes) +
         "': MIN:MAX needs --rdzv-backend c10d (static needs a fixed N)";
}

Complaint static_node_rank_below_nnodes(const LaunchConfig& c) {
  if (c.rdzv.backend != Backend::kStatic || c.rdzv.node_rank < c.rdzv.max_nodes) return std::nullopt;
  return "argument --node-rank: " + std::to_string(c.rdzv.node_rank) + " must be smaller than --nnodes " +
         std::to_string(c.rdzv.max_nodes);
}

Complaint etcd_needs_endpoint(const LaunchConfig& c) {
  if (c.rdzv.backend != Backend::kEtcd || !c.rdzv.endpoint.empty()) return std::nullopt;
  return "argument --rdzv-endpoint: --rdzv-backend etcd needs --rdzv-endpoint host:port[,host:port...] (etcd's "
         "client URLs)";
}

Complaint c10d_nodes_need_endpoint(const LaunchConfig& c) {
  if (c.rdzv.backend != Backend::kC10d || c.rdzv.standalone || c.rdzv.max_nodes <= 1 || !c.rdzv.endpoint.empty()) {
    return std::nullopt;
  }
  return "argument --rdzv-endpoint: --rdzv-backend c10d with several nodes needs --rdzv-endpoint host[:port]";
}

Complaint hostfile_or_hosts(const LaunchConfig& c) {
  if (!(c.multihost.hostfile && c.multihost.hosts)) return std::nullopt;
  return "use either --hostfile or --hosts, not both";
}

Complaint include_exclude_need_hosts(const LaunchConfig& c) {
  if (!(c.multihost.include || c.multihost.exclude) || c.multihost.enabled()) return std::nullopt;
  return "--include/--exclude select hosts of --hostfile or --hosts; give one of them";
}

Complaint standalone_is_one_node(const LaunchConfig& c) {
  if (!(c.rdzv.standalone && c.multihost.enabled())) return std::nullopt;
  return "--standalone is one node; it does not go with --hostfile/--hosts";
}

}  // namespace

const std::vector<FlagRule>& flag_rules() {
  static const std::vector<FlagRule> rules = {
      {"module_or_no_python", module_or_no_python},
      {"module_or_run_path", module_or_run_path},
      {"static_needs_fixed_nnodes", static_needs_fixed_nnodes},
      {"static_node_rank_below_nnodes", static_node_rank_below_nnodes},
      {"etcd_needs_endpoint", etcd_needs_endpoint},
      {"c10d_nodes_need_endpoint", c10d_nodes_need_endpoint},
      {"hostfile_or_hosts", hostfile_or_hosts},
      {"include_exclude_need_hosts", include_exclude_need_hosts},
      {"standalone_is_one_node", standalone_is_one_node},
  };
  return rules;
}

void check_flag_rules(const LaunchConfig& c) {
  for (const auto& rule : flag_rules()) {
    if (auto complaint = rule.broken(c)) throw UsageError(*complaint);
  }
}

}  // namespace ctrun::agent
