#include "agent/local_rendezvous.hpp"

namespace ctrun::agent {

LocalRendezvous::LocalRendezvous(std::string run_id, std::string backend, int local_world_size)
    : run_id_(std::move(run_id)), backend_(std::move(backend)), local_world_size_(local_world_size) {}

void LocalRendezvous::set_worker_store_address(const std::string& host, std::uint16_t port) {
  host_ = host;
  port_ = port;
}

rdzv::RoundInfo LocalRendezvous::next_rendezvous() {
  if (closed_) throw rdzv::RendezvousClosedError("run " + run_id_ + " is closed");
  rdzv::RoundInfo info;
  info.round = round_++;
  info.group_rank = 0;
  info.group_world_size = 1;
  info.base_global_rank = 0;
  info.global_world_size = local_world_size_;
  info.base_role_rank = 0;
  info.role_world_size = local_world_size_;
  info.master_addr = host_;
  info.master_port = port_;
  return info;
}

}  // namespace ctrun::agent
