#pragma once
// Watches the presence keys (presence.hpp) of a few members of the round and records a member whose key vanished
// as dead (the same keys as a lost heartbeat: over, exit, gone). Polled by the handler's loss thread every few
// hundred milliseconds: one CHECK of at most kWatchWindow keys while all are there.
//
// Who watches whom: every member watches the kWatchWindow ranks after its own, round the ring, so the whole job
// costs O(N) reads per period and a death is noticed unless every one of its watchers died with it (then the
// heartbeat decides). A key is a sign of death only after it was seen: a member that died before writing its key
// is left to the heartbeat, and a late writer is never taken for a dead one.
//
// What is not a death: a member whose exit is recorded (it left, or re-rendezvous), a round that ended with its
// exit barrier passed, a closed run (a final failure shuts it down): each of those releases its key on purpose.

#include <cstdint>
#include <optional>
#include <set>
#include <vector>

#include "rendezvous/join_op.hpp"
#include "rendezvous/keys.hpp"
#include "store/store.hpp"

namespace ctrun::rdzv {

class PresenceWatch {
 public:
  static constexpr int kWatchWindow = 2;

  PresenceWatch(store::Store& store, const std::string& run_id, std::chrono::seconds ttl)
      : store_(store), keys_(run_id), ttl_(ttl) {}

  // The ranks that `m.rank` watches: the next kWatchWindow ranks round the ring, never itself.
  static std::vector<int> watched(const Membership& m);

  // One poll of round m.round (a new round starts afresh). Returns the ranks this call declared dead.
  std::vector<int> poll(const Membership& m);

 private:
  void declare(const Membership& m, int rank);

  store::Store& store_;
  Keys keys_;
  std::chrono::seconds ttl_;
  std::optional<std::uint64_t> round_;
  std::set<int> seen_;  // ranks whose key was there at least once this round
  std::set<int> done_;  // ranks no longer watched (declared, or gone on purpose)
};

}  // namespace ctrun::rdzv
