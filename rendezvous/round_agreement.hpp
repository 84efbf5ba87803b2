#pragma once
// Agreements the agents of one c10d round make through the round's store (RoundInfo::store, scoped to the round).
//
// The restart count: a worker failure on one node consumes a restart there, while the other nodes follow into the
// new round as a membership change (no restart consumed, as torchrun). Workers of one round must still agree on
// TORCHELASTIC_RESTART_COUNT: torch <= 2.0 workers prefix every key of the shared agent store with
// /worker/attempt_<count>, so differing counts would never meet. The round's count is the largest any member holds.

#include <chrono>
#include <functional>
#include <optional>
#include <string>

#include "rendezvous/handler.hpp"
#include "store/store.hpp"

namespace ctrun::rdzv {

// Every member of the round calls this once; returns max(mine over all group_world_size members), or nullopt when
// `round_over()` turns true while waiting (a member died before it arrived: re-rendezvous). One compare-and-set
// (uncontended: one try), one counter add, one wait (in slices, to ask round_over()). Throws store::StoreError
// (TimeoutError when a member never arrives within timeout).
std::optional<int> agree_restart_count(store::Store& round_store, int mine, int group_world_size,
                                       store::Duration timeout, const std::function<bool()>& round_over);

// A round every member of which holds the same restart count.
struct AgreedRound {
  RoundInfo round;
  int restart_count = 0;
};

// The agent's join: next_rendezvous(), then, in a c10d round of several members, agree_restart_count() with
// `restart_count` (static rounds and single members keep it). A round that breaks before every member arrived is
// left for the next, at most max_broken_rounds times. Throws RendezvousError (a failed agreement included).
AgreedRound next_agreed_round(Handler& handler, int restart_count, store::Duration agreement_timeout,
                              int max_broken_rounds = 100);

// Whether the running round must end: a node waits to join, a member was lost, or the store failed.
struct MembershipCheck {
  int waiting = 0;          // nodes waiting to join
  bool broken = false;      // a member left or died, or the store failed
  bool store_lost = false;  // the rendezvous store failed (its host died, or it restarted empty)
  std::string reason;       // Handler::restart_reason(), or the store's error
  bool changed() const { return waiting > 0 || broken; }
};
// The handler's num_nodes_waiting() / round_broken() (store reads): blocking, called where the handler is.
MembershipCheck check_membership(Handler& handler);

}  // namespace ctrun::rdzv
