#pragma once
// The run's lease: every key of a run id is bound to ONE etcd lease shared by all its agents, so that a run whose
// agents are all gone vanishes from etcd after lease_ttl, while any live agent keeps the whole run alive.
// (A per-agent lease would not do: the decider writes keys every node needs long after the decider may have died.)
//
// The first agent grants the lease and publishes its id at <prefix>lease with a create-only txn (the key is bound to
// the lease itself); the others read it. A thread sends a keep-alive every ttl/3. If the lease is gone (etcd was
// unreachable for longer than the TTL), the next acquire() makes a new one.

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "rendezvous/etcd/etcd_client.hpp"

namespace ctrun::rdzv::etcd {

class RunLease {
 public:
  // Acquires (or joins) the lease; throws store::StoreError if etcd cannot be reached.
  RunLease(std::shared_ptr<Client> client, std::string key, std::chrono::seconds ttl);
  ~RunLease();

  std::int64_t id() const { return id_.load(); }
  // The lease `stale` was found missing: acquire a live one (once, however many callers report the same id).
  std::int64_t renew(std::int64_t stale);
  std::chrono::seconds ttl() const { return ttl_; }

 private:
  std::int64_t acquire();
  void keep_alive_loop();

  std::shared_ptr<Client> client_;
  std::string key_;
  std::chrono::seconds ttl_;
  std::atomic<std::int64_t> id_{0};
  std::mutex mutex_;  // guards acquire(); stopping_ is set under it (the keep-alive's wait)
  std::condition_variable wake_;
  std::atomic<bool> stopping_{false};
  std::thread thread_;
};

}  // namespace ctrun::rdzv::etcd
