#include "rendezvous/etcd/etcd_lease.hpp"

#include <fmt/format.h>

#include "common/log.hpp"

namespace ctrun::rdzv::etcd {

RunLease::RunLease(std::shared_ptr<Client> client, std::string key, std::chrono::seconds ttl)
    : client_(std::move(client)), key_(std::move(key)), ttl_(std::max(ttl, std::chrono::seconds(2))) {
  {
    std::lock_guard lock(mutex_);
    id_ = acquire();
  }
  thread_ = std::thread([this] { keep_alive_loop(); });
}

RunLease::~RunLease() {
  // A keep-alive under way against a dead cluster would hold the agent's exit for the client's request_timeout.
  client_->abandon();
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

// Under mutex_.
std::int64_t RunLease::acquire() {
  for (int attempt = 0; attempt < 5; ++attempt) {
    auto found = client_->range(key_);
    if (!found.kvs.empty()) {
      const auto id = std::stoll(found.kvs.front().value);
      if (client_->lease_keep_alive(id) > 0) return id;
      std::this_thread::sleep_for(std::chrono::milliseconds(200));  // expiring right now: its key goes with it
      continue;
    }
    const auto id = client_->lease_grant(ttl_);
    auto r = client_->txn({Compare{Compare::Target::kCreate, key_, 0, {}}}, {Op::put(key_, std::to_string(id), id)},
                          {Op::get(key_)});
    if (r.succeeded) {
      log::get("rdzv")->info("etcd: run lease {:x} (ttl {} s) published at {}", id, ttl_.count(), key_);
      return id;
    }
    client_->lease_revoke(id);  // another agent was first: use its lease
    if (!r.ranges.empty() && !r.ranges.front().kvs.empty()) {
      const auto theirs = std::stoll(r.ranges.front().kvs.front().value);
      if (client_->lease_keep_alive(theirs) > 0) return theirs;
    }
  }
  throw store::StoreError(fmt::format("etcd: could not acquire the run lease at {}", key_));
}

std::int64_t RunLease::renew(std::int64_t stale) {
  std::lock_guard lock(mutex_);
  if (id_ != stale) return id_;
  log::get("rdzv")->warn(
      "etcd: the run lease {:x} expired (etcd unreachable for longer than lease_ttl?): the run's "
      "keys were dropped; acquiring a new lease",
      stale);
  id_ = acquire();
  return id_;
}

void RunLease::keep_alive_loop() {
  std::unique_lock lock(mutex_);
  while (!stopping_) {
    wake_.wait_for(lock, ttl_ / 3, [this] { return stopping_.load(); });
    if (stopping_) break;
    const auto id = id_.load();
    lock.unlock();
    bool lost = false;
    try {
      lost = client_->lease_keep_alive(id) == 0;
    } catch (const std::exception& e) {  // etcd unreachable: keep trying; the TTL is the budget
      if (!stopping_.load()) log::get("rdzv")->warn("etcd: keep-alive of the run lease failed: {}", e.what());
    }
    if (lost) {
      try {
        renew(id);
      } catch (const std::exception& e) {
        if (!stopping_.load()) log::get("rdzv")->warn("etcd: could not renew the run lease: {}", e.what());
      }
    }
    lock.lock();
  }
}

}  // namespace ctrun::rdzv::etcd
