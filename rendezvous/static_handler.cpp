#include "rendezvous/static_handler.hpp"

#include <unistd.h>

#include <fmt/format.h>

#include "rendezvous/records.hpp"
#include "store/prefix_store.hpp"

namespace ctrun::rdzv {

StaticHandler::StaticHandler(StaticConfig config, NodeSpec node, std::shared_ptr<store::Store> store,
                             std::shared_ptr<void> keep_alive)
    : config_(std::move(config)), node_(std::move(node)), store_(std::move(store)), keep_alive_(std::move(keep_alive)) {
  if (config_.node_rank < 0 || config_.node_rank >= config_.num_nodes)
    throw RendezvousError(fmt::format("--node-rank {} is out of range for --nnodes {}: use 0..{}", config_.node_rank,
                                      config_.num_nodes, config_.num_nodes - 1));
}

std::string StaticHandler::key(const std::string& name) const {
  return fmt::format("ctrun.static.{}/{}", config_.run_id, name);
}

RoundInfo StaticHandler::next_rendezvous() {
  if (round_) return *round_;
  const int n = config_.num_nodes;
  NodeRecord me{node_.addr,          ::getpid(),          node_.local_world_size, node_.role,
                config_.master.host, config_.master.port, config_.node_rank};
  try {
    store_->set(key(fmt::format("node/{}", config_.node_rank)), me.encode());
    if (config_.node_rank == 0) {
      std::vector<std::string> keys;
      for (int r = 0; r < n; ++r) keys.push_back(key(fmt::format("node/{}", r)));
      std::vector<NodeRecord> nodes;
      for (const auto& v : store_->multi_get(keys)) nodes.push_back(NodeRecord::decode(v));
      // The node rank is the order (arrival field = node rank breaks every tie the same way).
      for (auto& node : nodes) node.addr = fmt::format("{:09}", node.arrival);
      std::vector<std::string> akeys, avals;
      for (const auto& a : assign_ranks(nodes)) {
        akeys.push_back(key(fmt::format("assign/{}", a.group_rank)));
        avals.push_back(a.encode());
      }
      store_->multi_set(akeys, avals);
    }
    Assignment a = Assignment::decode(store_->get(key(fmt::format("assign/{}", config_.node_rank))));
    // Rank 0 returns only once every node has read its assignment: its agent may serve its worker store on this
    // very store and clear it for a fresh attempt as soon as we return.
    if (store_->add(key("acked"), 1) == n) store_->set(key("acked_all"), "1");
    if (config_.node_rank == 0) store_->wait({key("acked_all")});
    a.master_addr = config_.master.host;  // the workers' store is the rendezvous store (as torchrun)
    a.master_port = config_.master.port;
    RoundInfo info = round_info(a, 0, std::make_shared<store::PrefixStore>(config_.run_id, store_));
    round_ = info;
    return info;
  } catch (const store::TimeoutError& e) {
    throw RendezvousTimeoutError(fmt::format(
        "static rendezvous '{}' timed out: not every one of the {} nodes (--nnodes) reached the store at {} ({}). "
        "Check --master-addr/--master-port and --node-rank on every node.",
        config_.run_id, n, config_.master.to_string(), e.what()));
  } catch (const store::StoreError& e) {
    throw RendezvousConnectionError(fmt::format("static rendezvous '{}': store at {} failed: {}", config_.run_id,
                                                config_.master.to_string(), e.what()));
  }
}

bool StaticHandler::exit_barrier(store::Duration timeout) {
  try {
    if (store_->add(key("exit_barrier"), 1) >= config_.num_nodes) store_->set(key("exit_barrier_done"), "1");
    store_->wait({key("exit_barrier_done")}, timeout);
    return true;
  } catch (const store::TimeoutError&) {
    return false;  // a store that failed otherwise (node rank 0's agent gone) is said by the caller as such
  }
}

}  // namespace ctrun::rdzv
