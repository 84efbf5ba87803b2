#include "rendezvous/etcd/member_lease.hpp"

#include "common/log.hpp"
#include "rendezvous/etcd/etcd_store.hpp"

namespace ctrun::rdzv::etcd {
namespace {

Options short_requests(Options o, std::chrono::seconds ttl) {
  const auto budget =
      std::max<store::Duration>(std::chrono::duration_cast<store::Duration>(ttl) / 2, std::chrono::milliseconds(500));
  o.request_timeout = std::min(o.request_timeout, budget);
  o.attempt_timeout = std::min(o.attempt_timeout, budget);
  return o;
}

}  // namespace

MemberLease::MemberLease(const Options& options, std::chrono::seconds ttl)
    : client_(std::make_shared<Client>(short_requests(options, ttl))), ttl_(ttl) {
  thread_ = std::thread([this] { keep_alive_loop(); });
}

MemberLease::~MemberLease() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
  release();
}

void MemberLease::attach(const std::string& key, const std::string& value) {
  std::lock_guard lock(mutex_);
  for (int attempt = 0;; ++attempt) {
    if (id_ == 0) {
      id_ = client_->lease_grant(ttl_);
      log::get("rdzv")->debug("etcd: member lease {:x} (ttl {} s)", id_, ttl_.count());
    }
    try {
      client_->put(EtcdStore::to_etcd(key), value, id_);
      return;
    } catch (const EtcdError& e) {
      if (e.code() != GrpcStatus::kNotFound || attempt > 0) throw;
      id_ = 0;  // expired between the keep-alives: grant a new one, once
    }
  }
}

void MemberLease::release() {
  std::int64_t id = 0;
  {
    std::lock_guard lock(mutex_);
    std::swap(id, id_);
  }
  if (id == 0) return;
  try {
    client_->lease_revoke(id);
  } catch (const std::exception& e) {  // etcd unreachable: the lease expires by itself within ttl
    log::get("rdzv")->debug("etcd: could not revoke the member lease {:x}: {}", id, e.what());
  }
}

void MemberLease::keep_alive_loop() {
  bool failing = false;
  std::unique_lock lock(mutex_);
  while (!stopping_) {
    wake_.wait_for(lock, std::chrono::duration_cast<std::chrono::milliseconds>(ttl_) / 4, [this] { return stopping_; });
    if (stopping_ || id_ == 0) continue;
    const auto id = id_;
    lock.unlock();
    bool lost = false;
    try {
      lost = client_->lease_keep_alive(id) == 0;
      failing = false;
    } catch (const std::exception& e) {  // etcd unreachable: keep trying; the TTL is the budget
      auto log = log::get("rdzv");
      log->log(failing ? spdlog::level::debug : spdlog::level::warn,
               "etcd: keep-alive of this member's lease failed: {}", e.what());
      failing = true;  // said once per outage: one try every ttl/4 would flood the log
    }
    lock.lock();
    if (lost && id_ == id) {
      log::get("rdzv")->warn(
          "etcd: this member's lease {:x} expired (no keep-alive reached etcd for {} s): the other members take this "
          "node for dead; it joins the next round",
          id, ttl_.count());
      id_ = 0;
    }
  }
}

}  // namespace ctrun::rdzv::etcd
