#pragma once
// Presence (presence.hpp) on etcd: a lease of this agent's own with a short TTL (--rdzv-conf member_ttl, 2 s),
// kept alive by a thread of its own every ttl/4, to which the agent binds its alive/<rank> key of every round it is
// a member of. A killed agent sends no more keep-alives: etcd drops the lease and its keys member_ttl later, and
// the members watching the key (presence_watch.hpp) declare the node dead. The run's shared lease (etcd_lease.hpp)
// cannot do this: it outlives every agent but the last on purpose.
//
// The lease is granted at the first attach() and again after it was lost (etcd unreachable for member_ttl: the
// others then take this node for dead, and it follows them into the next round like any survivor of a broken
// one). release() revokes it. etcd extends every lease on a leader change, so an election is not a death.

#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <thread>

#include "rendezvous/etcd/etcd_client.hpp"
#include "rendezvous/presence.hpp"

namespace ctrun::rdzv::etcd {

class MemberLease final : public Presence {
 public:
  // Opens a client of its own whose every request, failover included, gives up within ttl/2: a keep-alive must
  // never outlast its period.
  MemberLease(const Options& options, std::chrono::seconds ttl);
  ~MemberLease() override;

  void attach(const std::string& key, const std::string& value) override;
  void release() override;
  std::chrono::seconds ttl() const override { return ttl_; }

 private:
  void keep_alive_loop();

  std::shared_ptr<Client> client_;
  std::chrono::seconds ttl_;
  std::mutex mutex_;  // guards id_ and stopping_
  std::condition_variable wake_;
  std::int64_t id_ = 0;  // 0: none (not yet granted, lost, or released)
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace ctrun::rdzv::etcd
