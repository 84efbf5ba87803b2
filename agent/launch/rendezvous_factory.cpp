#include "agent/launch/rendezvous_factory.hpp"

#include "agent/launch/local_rendezvous.hpp"
#include "common/hostname.hpp"
#include "rendezvous/factory.hpp"

namespace ctrun::agent {

bool is_single_node(const LaunchConfig& config) {
  if (config.rdzv.standalone) return true;
  // A c10d endpoint is a real rendezvous even for one node: its run id can be closed and reused by mistake.
  if (config.rdzv.backend == rdzv::Backend::kC10d && !config.rdzv.endpoint.empty()) return false;
  if (config.rdzv.backend == rdzv::Backend::kEtcd) return false;  // etcd always has an endpoint (checked before)
  return config.rdzv.max_nodes <= 1;
}

std::string waiting_for_nodes_message(const LaunchConfig& config, const std::string& run_id, const std::string& backend,
                                      long long waited_s) {
  const std::string nodes =
      config.rdzv.min_nodes == config.rdzv.max_nodes
          ? std::to_string(config.rdzv.min_nodes)
          : std::to_string(config.rdzv.min_nodes) + " to " + std::to_string(config.rdzv.max_nodes);
  const std::string endpoint =
      config.rdzv.endpoint.empty()
          ? config.rdzv.master_addr + ":" + (config.rdzv.master_port ? std::to_string(*config.rdzv.master_port) : "?")
          : config.rdzv.endpoint;
  return "waiting for the other nodes of rendezvous '" + run_id + "' (" + nodes + " nodes, " + backend +
         " backend, endpoint " + endpoint + "): " + std::to_string(waited_s) + " s so far";
}

std::string node_address(const LaunchConfig& config) {
  if (config.rdzv.local_addr && !config.rdzv.local_addr->empty()) return *config.rdzv.local_addr;
  return host::fqdn();
}

rdzv::RendezvousParameters rendezvous_parameters(const LaunchConfig& config) {
  rdzv::RendezvousParameters p;
  p.backend = rdzv::backend_name(config.rdzv.backend);
  p.endpoint = config.rdzv.endpoint;
  p.run_id = config.rdzv.id;
  p.min_nodes = config.rdzv.min_nodes;
  p.max_nodes = config.rdzv.max_nodes;
  p.node_rank = config.rdzv.node_rank;
  p.local_addr = config.rdzv.local_addr.value_or("");
  p.master_addr = config.rdzv.master_addr;
  p.master_port =
      config.rdzv.master_port ? static_cast<std::uint16_t>(*config.rdzv.master_port) : rdzv::kDefaultMasterPort;
  p.config = config.rdzv.conf;
  p.secret = config.secret;
  return p;
}

std::unique_ptr<rdzv::Handler> make_rendezvous_handler(const LaunchConfig& config,
                                                       std::optional<std::uint16_t> agent_store_port) {
  if (is_single_node(config)) {
    return std::make_unique<LocalRendezvous>(config.rdzv.id, std::string(rdzv::backend_name(config.rdzv.backend)),
                                             config.workers.nproc_per_node);
  }
  rdzv::HandlerOptions options;
  if (config.rdzv.backend == rdzv::Backend::kStatic) options.agent_store_port = agent_store_port;
  return rdzv::create_handler(rendezvous_parameters(config),
                              rdzv::NodeSpec{node_address(config), config.workers.nproc_per_node, config.workers.role},
                              options);
}

}  // namespace ctrun::agent
