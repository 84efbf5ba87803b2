#pragma once
// The static backend (torchrun's static_tcp_rendezvous): --nnodes N --node-rank R, node rank 0 hosts the store at
// --master-addr:--master-port (or --rdzv-endpoint), which also serves the workers (TORCHELASTIC_USE_AGENT_STORE).
// No elasticity: the one round is computed once (rank 0 reads N records, writes N assignments) and reused on
// every restart, since neither the node ranks nor the local world sizes can change. Rank 0 returns only after every
// node read its assignment, so an agent that serves its worker store on the same port may clear it afterwards.

#include <memory>
#include <optional>

#include "rendezvous/handler.hpp"
#include "rendezvous/parameters.hpp"

namespace ctrun::rdzv {

struct StaticConfig {
  std::string run_id;
  int num_nodes = 1;
  int node_rank = 0;
  Endpoint master;  // MASTER_ADDR/MASTER_PORT of the workers
};

class StaticHandler final : public Handler {
 public:
  StaticHandler(StaticConfig config, NodeSpec node, std::shared_ptr<store::Store> store,
                std::shared_ptr<void> keep_alive = nullptr);

  void set_worker_store_address(const std::string&, std::uint16_t) override {}
  RoundInfo next_rendezvous() override;
  int num_nodes_waiting() override { return 0; }
  bool round_broken() override { return false; }
  std::string restart_reason() override { return {}; }
  bool exit_barrier(store::Duration timeout) override;
  bool is_closed() override { return false; }
  void set_closed() override {}
  bool shutdown() override { return true; }
  void leave() override {}
  std::string run_id() const override { return config_.run_id; }
  std::string backend() const override { return "static"; }
  bool use_agent_store() const override { return true; }

 private:
  std::string key(const std::string& name) const;

  StaticConfig config_;
  NodeSpec node_;
  std::shared_ptr<store::Store> store_;
  std::shared_ptr<void> keep_alive_;
  std::optional<RoundInfo> round_;
};

}  // namespace ctrun::rdzv
