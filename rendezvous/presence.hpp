#pragma once
// A member's presence key: a key of the round that the store itself removes when the member's agent is gone, so
// that the others notice a killed agent without waiting for its heartbeats to stop (presence_watch.hpp). On etcd
// it is a key bound to a short lease of the member's own (etcd/member_lease.hpp); ctrun's own store has its
// closed-connection log instead (loss_watch.hpp), and a store with neither leaves it to the heartbeat.

#include <chrono>
#include <string>

namespace ctrun::rdzv {

class Presence {
 public:
  virtual ~Presence() = default;
  // Writes `key` (the round's alive/<rank>), bound to this member's liveness; the keys of earlier rounds stay
  // until release(). Blocks for one store request: call it off the agent's thread. Throws store::StoreError.
  virtual void attach(const std::string& key, const std::string& value) = 0;
  // Drops every key attach() wrote at once. Call it only after the member's exit is recorded (or its round ended
  // with the exit barrier), so that the keys' vanishing reads as a departure, not a death. Bounded; never throws.
  virtual void release() = 0;
  // How long after the member's last sign of life its keys vanish: for messages.
  virtual std::chrono::seconds ttl() const = 0;
};

}  // namespace ctrun::rdzv
