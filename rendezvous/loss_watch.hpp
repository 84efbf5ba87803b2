#pragma once
// The fast path of failure detection: a member whose agent process dies closes its connection at once, and a store
// with ctrun's ON_CLOSE (ctstore, an agent-hosted store; store/store.hpp append_on_close) appends "-<rank>," to the
// round's `lost` key when the member's connection closes; a client that reconnects appends "+<rank>,". Every member
// waits on that key (an asynchronous WAIT on its one connection: C10dHandler); when it appears, each gives the member
// kReconnectGrace to come back, then the settlers of the lost ranks (settlers(): two members, not N) record every
// rank whose closes outnumber its reconnects as dead (the same keys as a lost heartbeat: over, exit, gone). Where
// the store has no ON_CLOSE nothing is registered: on torch's servers only the heartbeat detects deaths; etcd has its
// members' leases instead (presence_watch.hpp).
//
// One wake-up per round: after the first entries (a death ends the round; a blip, every rank back, is rare) the
// round is left to the heartbeat.

#include <chrono>
#include <set>
#include <string>
#include <string_view>

#include "rendezvous/keys.hpp"
#include "rendezvous/membership.hpp"
#include "store/store.hpp"

namespace ctrun::rdzv {

// How long a closed connection may take to come back before its member counts as dead. A member's client
// reconnects at its next store call; an agent whose process died never does.
inline constexpr store::Duration kReconnectGrace = std::chrono::milliseconds(500);
// How much later than ranks 0 and 1 the other members read the log (C10dHandler::on_lost): a settler among the first
// two ends the round before they look, unless both of them are lost.
inline constexpr store::Duration kLateSettle = std::chrono::milliseconds(1000);

// The ranks lost for good in a `lost` log: those with more closes (or silences) than reconnects ("-1,-2,+1," gives
// {2}).
// Not the last entry: a client that drops a stalled connection (a network drop longer than its timeout) dials
// again as soon as the link is back, while its old connection's FIN waits for TCP's retransmission timer, so the
// server may see the reconnect ("+1,") before the close ("-1,"). Each reconnect follows the loss of a registered
// connection, so a live member's closes never outnumber its reconnects once both arrive; a dead member's last
// connection closes with no reconnect after it. Malformed entries are skipped.
std::set<int> lost_ranks(std::string_view log);

// The registrations a member makes on its connection for a round: "-<rank>," when it closes, "!<rank>," when it
// has been silent too long (ON_SILENCE), "+<rank>," when it reconnects or speaks again.
std::string on_close_entry(int rank);
std::string on_silence_entry(int rank);
std::string on_reconnect_entry(int rank);

// Who records the deaths of `lost` (ranks of a round of `members`): the lowest rank not lost, and the first rank
// after each lost one (cyclically) that is not lost. At 16,384 nodes a kill wakes every member's watch, but only
// these few write: the others learn it from the round's `over` key.
std::set<int> settlers(const std::set<int>& lost, int members);

class LossWatch {
 public:
  enum class Outcome { kNothing, kDeclared, kBlip };

  // `silence`: the ON_SILENCE timeout the members registered (for the words of a death by silence).
  LossWatch(store::Store& store, const std::string& run_id, store::Duration silence = {})
      : store_(store), keys_(run_id), silence_(silence) {}

  // The round's `lost` key appeared `grace` ago: reads it and, if this member is a settler of the ranks still lost,
  // declares them dead unless they left or the round ended with its exit barrier passed. kBlip: nobody was lost for
  // good; kNothing: left to the settlers.
  Outcome settle(const Membership& m, store::Duration grace);
  // As settle(), with the log already read (a member of a round that is over, waiting for it to drain: the closes in
  // the log are at least one wait old, and a close declared in a round that ended anyway costs nothing).
  Outcome settle_log(const Membership& m, std::string_view log, store::Duration grace = kReconnectGrace);

 private:
  store::Store& store_;
  Keys keys_;
  store::Duration silence_;
};

}  // namespace ctrun::rdzv
