#include "agent/launch/local_rendezvous.hpp"

#include "rendezvous/records.hpp"

namespace ctrun::agent {

LocalRendezvous::LocalRendezvous(std::string run_id, std::string backend, int local_world_size)
    : run_id_(std::move(run_id)), backend_(std::move(backend)), local_world_size_(local_world_size) {}

void LocalRendezvous::set_worker_store_address(const std::string& host, std::uint16_t port) {
  host_ = host;
  port_ = port;
}

rdzv::RoundInfo LocalRendezvous::next_rendezvous() {
  if (closed_) throw rdzv::RendezvousClosedError("run " + run_id_ + " is closed");
  rdzv::Assignment one;  // the only node: every rank is local
  one.global_world_size = one.role_world_size = local_world_size_;
  one.master_addr = host_;
  one.master_port = port_;
  return rdzv::round_info(one, round_++);
}

}  // namespace ctrun::agent
