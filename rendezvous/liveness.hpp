#pragma once
// Heartbeats and failure detection for the members of a round, driven by tick(now) (a task on the handler's runner,
// a fake clock in tests). Cost per check (every interval/4): one round trip per member reading at most kWatchWindow
// counters (Store::peek) and a bulk read of N counters by the monitor; a beat is one SET per member per interval
// sent in the same write: O(N) for the whole job.
//
// Where the store is ctrun's (ON_CLOSE and ON_SILENCE), the server itself reports a member whose connection closed
// or has sent nothing for interval x max_attempts - interval/2, on the round's `lost` key (loss_watch.hpp): then a
// member only beats (one SET per interval, no reply, no read) and the checks below read nothing.
//
// Who watches whom: the lowest-ranked member that has not exited is the monitor and watches every higher rank;
// every other member watches only that monitor and the next kWatchWindow - 1 ranks after it (so that several
// low ranks dying together are timed in parallel). When the monitor dies its watchers declare it dead and the
// next rank takes over, so no death goes unnoticed. A counter that does not move for
// keep_alive_interval x keep_alive_max_attempt - interval/2 (checked every interval/4) marks its member dead:
// detection lands within interval x max_attempt of the last heartbeat.

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>

#include "rendezvous/clock.hpp"
#include "rendezvous/keys.hpp"
#include "rendezvous/membership.hpp"
#include "store/store.hpp"

namespace ctrun::rdzv {

struct LivenessConfig {
  std::string run_id;
  store::Duration interval = std::chrono::seconds(5);
  int max_attempts = 3;
  // Beats on the wall clock's grid of `interval` (plus a few ms by rank), as every member's is: the store then reads
  // a job's beats in bursts, many per wake-up, where beats at random times wake it once each (at 16,384 idle nodes
  // the wake-ups were most of its CPU: scale_bench). The gap between two beats stays within [interval/2,
  // 3 interval/2], inside the silence limit. Off in tests on a fake clock.
  bool align_beats = false;
};

class Liveness {
 public:
  static constexpr int kWatchWindow = 3;

  Liveness(store::Store& store, LivenessConfig config);

  // Beat as `rank` of round `round` and watch its members (replaces the previous round).
  void follow(const Membership& membership, TimePoint now);
  void stop();
  bool active() const { return membership_.has_value(); }
  // The store reports this member's closed connection (ON_CLOSE registered for the current round): the members
  // may wait for closes (loss_watch.hpp) instead of only timing heartbeats.
  bool reports_closes() const { return membership_ && registered_ == membership_->round && !no_on_close_; }

  // The loss watch of `round` woke once and found no death (a member silent for a while that spoke again, or one
  // another member settles): it waits no more this round, so from now this member times its watched ranks'
  // counters itself, as where the store has no ON_SILENCE. Without this a later death would go unnoticed.
  void time_heartbeats(std::uint64_t round);
  // The round's `over` key is set: the round ends, its members rejoin. Where the server times silences, nobody's
  // counter is timed from now on (only a rank never seen beating, as before its first tick), even after
  // time_heartbeats(): at 16,384 nodes those reads would be ~40,000 requests a second for as long as the next round
  // takes to form. A member lost while the others leave the round is settled from the `lost` log by the nodes waiting
  // for the round to drain (JoinOp's gate).
  void round_over(std::uint64_t round);

  // Beats and checks when due; returns when to call again (TimePoint::max() when inactive).
  TimePoint tick(TimePoint now);

 private:
  struct Seen {
    std::string value;
    TimePoint changed;
  };
  void check(TimePoint now);
  bool stale(int rank, const std::string& value, TimePoint now);
  // The member stopped beating: unless it left the round, declare it dead (which ends the round). Either way it
  // is no longer watched.
  void declare_gone(int rank, TimePoint now);

  store::Store& store_;
  LivenessConfig config_;
  Keys keys_;
  std::optional<Membership> membership_;
  int watch_ = 0;             // the member we watch; == our rank: we are the monitor of every higher rank
  std::map<int, Seen> seen_;  // last counter value per watched rank, and when it last moved
  std::set<int> exited_;      // ranks no longer watched (left or dead)
  std::set<int> beating_;     // watched ranks seen beating this round: registered, so the server times them
  // ON_CLOSE (the fast path, loss_watch.hpp): the round registered on the heartbeat connection, if any
  void register_on_close();
  std::optional<std::uint64_t> registered_;
  bool no_on_close_ = false;           // the store has no ON_CLOSE: never asked again
  bool server_times_silence_ = false;  // the registration includes ON_SILENCE: check() reads nothing
  bool timing_heartbeats_ = false;     // ... unless the loss watch is spent for this round (time_heartbeats)
  bool round_over_ = false;            // ... and the round is not over (round_over)
  // How long a member may send nothing before the server reports it silent: what a counter may stand still for.
  store::Duration silence_limit() const;
  store::Duration beat_gap() const;
  TimePoint next_beat_{};
  TimePoint next_check_{};
  std::uint64_t beats_ = 0;  // this member's beats in the round: the value it sets
};

}  // namespace ctrun::rdzv
