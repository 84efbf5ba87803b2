#pragma once
// The rendezvous of a single-node job (--standalone, --nnodes 1): no other agent to wait for, so each round
// completes at once with this node as group rank 0 and the agent's own worker store as MASTER_ADDR:PORT.
// Multi-node backends (rendezvous/) implement the same Handler interface and plug in where this one is made.

#include "rendezvous/handler.hpp"

namespace ctrun::agent {

class LocalRendezvous final : public rdzv::Handler {
 public:
  LocalRendezvous(std::string run_id, std::string backend, int local_world_size);

  void set_worker_store_address(const std::string& host, std::uint16_t port) override;
  rdzv::RoundInfo next_rendezvous() override;
  int num_nodes_waiting() override { return 0; }
  bool round_broken() override { return false; }
  std::string restart_reason() override { return {}; }
  bool exit_barrier(store::Duration) override { return true; }
  bool is_closed() override { return closed_; }
  void set_closed() override { closed_ = true; }
  bool shutdown() override {
    closed_ = true;
    return true;
  }
  void leave() override {}
  std::string run_id() const override { return run_id_; }
  std::string backend() const override { return backend_; }
  bool use_agent_store() const override { return true; }

 private:
  std::string run_id_;
  std::string backend_;
  int local_world_size_;
  std::string host_;
  std::uint16_t port_ = 0;
  std::uint64_t round_ = 0;
  bool closed_ = false;
};

}  // namespace ctrun::agent
