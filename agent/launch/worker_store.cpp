#include "agent/launch/worker_store.hpp"

#include <arpa/inet.h>

#include <stdexcept>
#include <utility>

#include <spdlog/spdlog.h>

#include "agent/launch/rendezvous_factory.hpp"
#include "agent/launch/store_relay.hpp"
#include "common/log.hpp"
#include "rendezvous/factory.hpp"
#include "rendezvous/parameters.hpp"
#include "store/server.hpp"

namespace ctrun::agent {
namespace {

bool is_numeric_address(const std::string& host) {
  unsigned char buf[sizeof(in6_addr)];
  return ::inet_pton(AF_INET, host.c_str(), buf) == 1 || ::inet_pton(AF_INET6, host.c_str(), buf) == 1;
}

}  // namespace

WorkerStore::WorkerStore(const std::string& host, std::uint16_t port, FailureHandler on_failure,
                         std::shared_ptr<const auth::Secret> secret) {
  store::ServerOptions options;
  options.host = host;
  options.port = port;
  options.secret = std::move(secret);
  options.on_failure = std::move(on_failure);
  server_ = std::make_unique<store::Server>(options);
  server_->start();
}

WorkerStore::~WorkerStore() { server_->stop(); }

std::uint16_t WorkerStore::port() const { return server_->port(); }
void WorkerStore::clear() { server_->clear(); }
// torch's TCPStore clients (and ours, store/tcp_store.hpp) put "/" before every user key on the wire.
void WorkerStore::set(const std::string& key, std::string value) { server_->set_local("/" + key, std::move(value)); }
std::uint64_t WorkerStore::keys() const { return server_->stats().keys; }

std::string worker_store_bind_host(const LaunchConfig& config) {
  const bool single = is_single_node(config);
  const bool at_endpoint =
      config.rdzv.backend == rdzv::Backend::kStatic && !config.rdzv.standalone && !config.rdzv.endpoint.empty();
  if (single && !at_endpoint)
    return config.rdzv.local_addr.value_or(config.rdzv.standalone ? "127.0.0.1" : config.rdzv.master_addr);
  if ((!single && config.rdzv.backend == rdzv::Backend::kStatic) || at_endpoint) {
    // A numeric address of this machine is bound as given (several "nodes" of one machine on 127.0.0.x); a host
    // name may resolve to another address here (127.0.1.1) than for the other nodes: bind every interface.
    const auto ep = rdzv::static_endpoint(rendezvous_parameters(config));
    return is_numeric_address(ep.host) && rdzv::is_local_host(ep.host) ? ep.host : "0.0.0.0";
  }
  return config.rdzv.local_addr && !config.rdzv.local_addr->empty() ? *config.rdzv.local_addr : "0.0.0.0";
}

WorkerStoreSite open_worker_store(const LaunchConfig& config, WorkerStore::FailureHandler on_failure) {
  WorkerStoreSite site;
  const bool single = is_single_node(config);
  site.static_multi_node = !single && config.rdzv.backend == rdzv::Backend::kStatic;
  const std::string bind_host = worker_store_bind_host(config);
  std::uint16_t port = 0;
  // torchrun's static backend serves its store at --rdzv-endpoint when one is given, for one node too.
  const bool at_endpoint =
      config.rdzv.backend == rdzv::Backend::kStatic && !config.rdzv.standalone && !config.rdzv.endpoint.empty();
  if (single && !at_endpoint) {
    site.host = bind_host;
    if (config.rdzv.backend == rdzv::Backend::kStatic && config.rdzv.master_port)
      port = static_cast<std::uint16_t>(*config.rdzv.master_port);
  } else if (site.static_multi_node || at_endpoint) {
    // As torchrun's static backend: node rank 0 serves one store at the master address (or the endpoint) for the
    // rendezvous and every worker of every node; the other nodes bind nothing.
    const auto ep = rdzv::static_endpoint(rendezvous_parameters(config));
    site.host = ep.host;
    port = ep.port;
  } else {
    // c10d: an ephemeral port on this node's address; the round's group rank 0 publishes it as MASTER_ADDR:PORT.
    site.host = node_address(config);
  }
  if (single && !at_endpoint && !config.rdzv.standalone && !config.rdzv.master_port &&
      config.rdzv.backend == rdzv::Backend::kStatic) {
    // torchrun's default: one node without --standalone serves the store on MASTER_PORT 29500, so a script that
    // sets MASTER_PORT=29500 itself finds it there. Taken (another job of this machine): a free port, said so.
    try {
      site.store = std::make_unique<WorkerStore>(bind_host, rdzv::kDefaultMasterPort, on_failure);
      return site;
    } catch (const std::exception& e) {
      ctrun::log::get("agent")->warn(
          "port {} (torchrun's default MASTER_PORT) is taken on {} ({}); the workers' store takes a free port "
          "instead: pass --master-port or --standalone to choose",
          rdzv::kDefaultMasterPort, bind_host, e.what());
    }
  }
  if (!site.static_multi_node || config.rdzv.node_rank == 0) {
    try {
      // Only the nodes' relays connect (they prove the secret), when every node has one.
      site.store = std::make_unique<WorkerStore>(bind_host, port, on_failure,
                                                 workers_store_needs_secret(config) ? config.secret : nullptr);
    } catch (const std::exception& e) {
      // Static node rank 0: the port is the job's MASTER_PORT; never share it with whoever else holds it.
      throw std::runtime_error("cannot start the workers' store on " + bind_host + ":" + std::to_string(port) + ": " +
                               e.what() +
                               ". If another process holds that port, stop it or choose a free one with "
                               "--master-port (the same on every node)");
    }
  }
  return site;
}

}  // namespace ctrun::agent
