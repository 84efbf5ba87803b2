#include "agent/launch/rendezvous_factory.hpp"

#include "agent/launch/local_rendezvous.hpp"
#include "common/hostname.hpp"
#include "rendezvous/factory.hpp"

namespace ctrun::agent {

bool is_single_node(const LaunchConfig& config) {
  if (config.standalone) return true;
  // A c10d endpoint is a real rendezvous even for one node: its run id can be closed and reused by mistake.
  if (config.rdzv_backend == rdzv::Backend::kC10d && !config.rdzv_endpoint.empty()) return false;
  if (config.rdzv_backend == rdzv::Backend::kEtcd) return false;  // etcd always has an endpoint (checked before)
  return config.max_nodes <= 1;
}

std::string waiting_for_nodes_message(const LaunchConfig& config, const std::string& run_id, const std::string& backend,
                                      long long waited_s) {
  const std::string nodes = config.min_nodes == config.max_nodes
                                ? std::to_string(config.min_nodes)
                                : std::to_string(config.min_nodes) + " to " + std::to_string(config.max_nodes);
  const std::string endpoint =
      config.rdzv_endpoint.empty()
          ? config.master_addr + ":" + (config.master_port ? std::to_string(*config.master_port) : "?")
          : config.rdzv_endpoint;
  return "waiting for the other nodes of rendezvous '" + run_id + "' (" + nodes + " nodes, " + backend +
         " backend, endpoint " + endpoint + "): " + std::to_string(waited_s) + " s so far";
}

std::string node_address(const LaunchConfig& config) {
  if (config.local_addr && !config.local_addr->empty()) return *config.local_addr;
  return host::fqdn();
}

rdzv::RendezvousParameters rendezvous_parameters(const LaunchConfig& config) {
  rdzv::RendezvousParameters p;
  p.backend = rdzv::backend_name(config.rdzv_backend);
  p.endpoint = config.rdzv_endpoint;
  p.run_id = config.rdzv_id;
  p.min_nodes = config.min_nodes;
  p.max_nodes = config.max_nodes;
  p.node_rank = config.node_rank;
  p.local_addr = config.local_addr.value_or("");
  p.master_addr = config.master_addr;
  p.master_port = config.master_port ? static_cast<std::uint16_t>(*config.master_port) : rdzv::kDefaultMasterPort;
  p.config = config.rdzv_conf;
  p.secret = config.secret;
  return p;
}

std::unique_ptr<rdzv::Handler> make_rendezvous_handler(const LaunchConfig& config,
                                                       std::optional<std::uint16_t> agent_store_port) {
  if (is_single_node(config)) {
    return std::make_unique<LocalRendezvous>(config.rdzv_id, std::string(rdzv::backend_name(config.rdzv_backend)),
                                             config.nproc_per_node);
  }
  rdzv::HandlerOptions options;
  if (config.rdzv_backend == rdzv::Backend::kStatic) options.agent_store_port = agent_store_port;
  return rdzv::create_handler(rendezvous_parameters(config),
                              rdzv::NodeSpec{node_address(config), config.nproc_per_node, config.role}, options);
}

}  // namespace ctrun::agent
