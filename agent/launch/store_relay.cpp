#include "agent/launch/store_relay.hpp"

#include <charconv>
#include <exception>

#include "agent/launch/rendezvous_factory.hpp"
#include "common/log.hpp"
#include "common/worker_env.hpp"
#include "store/relay.hpp"

namespace ctrun::agent {

// A c10d job of --nnodes 1 is not single-node for the rendezvous (it has an endpoint), but its workers are all on
// this node: they reach the store as directly as through a relay.
bool wants_store_relay(const LaunchConfig& config) {
  return config.rdzv.store_relay && !is_single_node(config) && config.rdzv.max_nodes > 1;
}

// Every node's workers go through their relay, and every relay proves the secret: the store can demand it. Not with
// the static backend, whose store is also the rendezvous' (its own rules).
bool workers_store_needs_secret(const LaunchConfig& config) {
  return config.secret && wants_store_relay(config) && config.rdzv.backend != rdzv::Backend::kStatic;
}

std::unique_ptr<NodeStoreRelay> NodeStoreRelay::open(const LaunchConfig& config) {
  if (!wants_store_relay(config)) return nullptr;
  try {
    store::RelayOptions options;  // loopback: the workers are on this node
    options.upstream_secret = config.secret;
    auto relay = std::make_unique<store::Relay>(options);
    relay->start();
    return std::unique_ptr<NodeStoreRelay>(new NodeStoreRelay(std::move(relay)));
  } catch (const std::exception& e) {
    if (workers_store_needs_secret(config))  // the relay is this node's workers' only way in
      throw std::runtime_error(std::string("cannot start this node's store relay (") + e.what() +
                               "); with a job secret the workers reach the job's store only through it. Free "
                               "loopback ports, or pass --store-relay off (the workers' store is then open: "
                               "docs/security.md)");
    log::get("agent")->warn("no store relay on this node ({}): its workers connect to the job's store themselves",
                            e.what());
    return nullptr;
  }
}

NodeStoreRelay::NodeStoreRelay(std::unique_ptr<store::Relay> relay) : relay_(std::move(relay)) {}
NodeStoreRelay::~NodeStoreRelay() {
  try {
    const auto c = relay_->stats().counters;
    log::get("agent")->info(
        "store relay: this node's workers sent {} requests, {} went to the job's store ({} answered with another "
        "rank's, {} answered here)",
        c.client_requests, c.upstream_requests, c.combined, c.answered_here);
  } catch (const std::exception&) {
    // its loop failed: said when it did
  }
}

std::string NodeStoreRelay::endpoint() const { return relay_->endpoint(); }

void NodeStoreRelay::before_start(int local_rank, std::map<std::string, std::string>& env) {
  namespace we = worker_env;
  auto value = [&](const char* name) {
    auto it = env.find(name);
    return it == env.end() ? std::string() : it->second;
  };
  if (value(we::kUseAgentStore) != we::kTrue) return;  // the workers host their own store: nothing to relay to
  const std::string host = value(we::kMasterAddr);
  const std::string port_text = value(we::kMasterPort);
  unsigned port = 0;
  const auto [end, ec] = std::from_chars(port_text.data(), port_text.data() + port_text.size(), port);
  if (host.empty() || ec != std::errc() || end != port_text.data() + port_text.size() || port == 0 || port > 65535)
    return;
  if (local_rank == 0) {
    relay_->connect(host, static_cast<std::uint16_t>(port));
    const std::string upstream = host + ":" + port_text;
    if (upstream != upstream_)
      log::get("agent")->info("this node's workers reach the job's store at {} through the store relay at {}", upstream,
                              endpoint());
    upstream_ = upstream;
  }
  env[we::kStoreRelay] = endpoint();
}

}  // namespace ctrun::agent
