#pragma once
// The hang and straggler detector: a pure function of the ranks' records over time (no clock, no I/O; the
// caller passes `now`), so the rules below are table-tested with a fake clock (tests/agent/hang/detector_test.cpp), as
// agent_policy and rendezvous/join_op are.
//
// Hang: in a group, the ranks furthest along are inside collective #k, and some member has not entered #k
// (has not issued it). Once the longest of their waits passes report_after_s the detector reports it (once per
// group and #k); once it passes hang_timeout_s (0: never) it gives a verdict naming the ranks to treat as
// failed: the culprits that are not themselves waiting inside another group's collective (those are victims of
// a culprit there; if every culprit waits elsewhere, all of them). When every member is inside #k and none
// finishes (a stall inside the op: a lost peer, a wedged device), the report names the peers they wait for.
// A member with no record is named by group rank and never failed; once its record arrives (another node's
// summary), the report and verdict are given again with its name.
// When the group moves on after a report, a "resolved" finding says after how long (one `resolve` step for
// every kind of episode).
//
// Why report_after_s defaults to 300 s: healthy jobs wait too (rank 0 writing a checkpoint or evaluating while
// the others sit in a barrier, a slow first batch, ranks started late on a loaded machine): those pauses are
// seconds to a few minutes. A real hang otherwise waits out torch's 30 min collective timeout and dies naming
// nobody. Five minutes keeps the report clear of most healthy pauses while saving most of those 30 min; and by
// default a report only logs and dumps stacks, it never kills (--hang-timeout makes it a failure).
//
// Point-to-point wait: a rank whose oldest pending send or recv has been pending report_after_s is reported once
// (naming its peer; the wording says what the peer is doing), and "resolved" when that op finishes. Report only,
// never a verdict, even with hang_timeout_s: pipeline schedules wait in recvs by design, and a p2p wait that
// holds up a collective is named by the collective rule (its culprit "itself waiting in recv from rank N").
//
// Straggler: a rank that arrives last into collectives waits least inside them, while the others wait for it.
// Over each window of straggler_every_s, per group, each rank's mean time inside an op (busy / ops) is compared:
// the rank with the least is the last to arrive, and the others' median minus its own is its lag per op. It is
// reported when the lag is at least straggler_min_lag_s and explains at least straggler_min_share of the others'
// wait (so a uniformly slow network reports nobody). Durations only: no clock is compared across hosts.

#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "agent/hang/records.hpp"

namespace ctrun::agent::hang {

struct DetectorConfig {
  double report_after_s = 300;
  double hang_timeout_s = 0;  // 0: hangs are reported, never a failure
  double straggler_every_s = 300;
  double straggler_min_lag_s = 0.01;
  double straggler_min_share = 0.5;
  std::uint64_t straggler_min_ops = 3;
};

// A member of a group, as the findings name it.
struct Member {
  int global_rank = -1;  // -1: not seen (no record: it has not created the group, or its node publishes nothing)
  int group_rank = -1;
  // Waiting inside another group's collective (a victim of a hang there): that group's ordinal, else -1.
  int blocked_in_group = -1;
  std::uint64_t blocked_in_seq = 0;
  std::uint32_t blocked_in_op = 0;
  // Else waiting in a point-to-point op pending longer than report_after_s: recv (else send), its group's
  // ordinal and the peer's global rank (-1 unknown); p2p_group is -1 when not.
  int p2p_group = -1;
  bool p2p_recv = false;
  int p2p_peer = -1;
};

struct HangFinding {
  enum class Kind { kReport, kVerdict, kResolved };
  Kind kind = Kind::kReport;
  std::uint64_t group_id = 0;
  int group_ordinal = 0;  // as the lowest member rank numbers it ("group 0")
  int group_size = 0;
  std::uint64_t seq = 0;  // collective #seq of the group
  std::uint32_t op = 0;
  std::uint32_t dtype = 0;
  std::uint64_t bytes = 0;
  std::vector<Member> culprits;  // have not entered #seq (empty: all entered, see waited_for)
  std::vector<int> waiting;      // global ranks inside #seq
  double waited_s = 0;           // the longest wait among them (kResolved: how long the episode lasted)
  std::vector<int> waited_for;   // all entered: the global ranks the waiters wait on
  std::vector<int> to_fail;      // kVerdict: global ranks to treat as failed
};

struct P2pFinding {
  enum class Kind { kReport, kResolved };
  Kind kind = Kind::kReport;
  int global_rank = -1;  // the rank waiting
  std::uint64_t group_id = 0;
  int group_ordinal = 0;  // in the waiting rank's numbering
  bool recv = false;      // a recv (else a send)
  int peer_group_rank = -1;
  int peer = -1;  // the peer's global rank (-1: no record of it seen)
  std::uint64_t bytes = 0;
  std::uint32_t pending = 0;  // its point-to-point ops pending in that group
  double waited_s = 0;        // how long the oldest has been pending (kResolved: the episode's length)
};

struct StragglerFinding {
  std::uint64_t group_id = 0;
  int group_ordinal = 0;
  int global_rank = -1;     // the rank last into the group's collectives
  double lag_s = 0;         // per op, this window: the others' median time inside an op minus its own
  double median_lag_s = 0;  // median of its lag over the recent windows it was last in
  std::uint64_t ops = 0;    // ops in the window
  double window_s = 0;
};

struct Findings {
  std::vector<HangFinding> hangs;
  std::vector<StragglerFinding> stragglers;
  std::vector<P2pFinding> p2p;
};

class Detector {
 public:
  explicit Detector(DetectorConfig config = {}) : config_(config) {}

  // One look at every rank's records (ranks of every node; ages already extrapolated to now_s).
  Findings observe(double now_s, const std::vector<RankRecord>& ranks);

  // The last window's lag per op of a rank in its most laggard group (seconds; 0 when unknown): the live table.
  double lag_of(int global_rank) const;
  // The episodes reported and still open (the failure summary names them).
  std::vector<HangFinding> open_hangs() const;
  std::vector<P2pFinding> open_p2p_waits() const;
  const DetectorConfig& config() const { return config_; }
  // `--hang-timeout auto` learns the timeout as the job runs (auto_timeout.hpp): later looks use this one.
  void set_hang_timeout(double seconds) { config_.hang_timeout_s = seconds; }

 private:
  struct Episode {
    std::uint64_t seq = 0;
    bool reported = false;
    bool verdict = false;
    int unseen = 0;           // culprits with no record when last looked at
    std::vector<int> failed;  // the verdict's to_fail
    HangFinding last;
  };
  struct P2pEpisode {
    std::uint64_t done = 0;  // the rank's finished p2p ops when it began: one more ends it
    bool reported = false;
    P2pFinding last;
  };
  struct Window {
    double start_s = -1;
    std::map<int, std::pair<std::uint64_t, double>> at_start;  // global rank -> (done, busy_s)
    std::map<int, std::deque<double>> lags;                    // global rank -> its lags when it was last
  };
  struct Seen {
    const RankRecord* rank;
    const GroupRecord* group;
  };
  using Groups = std::map<std::uint64_t, std::vector<Seen>>;  // by group id: the members with a record

  // The three rules, each over this look's records and its own episodes.
  void watch_p2p(const std::vector<RankRecord>& ranks, std::vector<P2pFinding>& out);
  void watch_hangs(const std::vector<RankRecord>& ranks, const Groups& groups, std::vector<HangFinding>& out);
  void watch_stragglers(double now_s, const Groups& groups, std::vector<StragglerFinding>& out);
  // One group's hang rule: the finding for the op its furthest members are in, carried into its episode.
  void watch_hang(std::uint64_t id, const std::vector<Seen>& members, const std::vector<RankRecord>& ranks,
                  std::vector<HangFinding>& out);
  void advance(Episode& e, HangFinding f, bool all_in, std::vector<HangFinding>& out) const;
  Member culprit(const Seen& m, std::uint64_t group_id, const std::vector<RankRecord>& ranks) const;
  std::optional<StragglerFinding> close_window(double now_s, std::uint64_t id, const std::vector<Seen>& members,
                                               Window& w);

  DetectorConfig config_;
  std::map<std::uint64_t, Episode> episodes_;                // by group id
  std::map<std::uint64_t, Window> windows_;                  // by group id
  std::map<std::pair<int, std::uint64_t>, P2pEpisode> p2p_;  // by (global rank, group id)
  std::map<int, double> lag_;                                // global rank -> lag (max over its groups)
};

// Non-comm workers (torch's own gloo/NCCL): ctrun cannot read their collectives, only whether each rank still
// uses CPU time (/proc/<pid>/stat utime+stime of all its threads) or writes output. quiet_s() is how long no
// rank has done either: a job whose ranks all sit blocked (a gloo collective waits in epoll; a Python sleep)
// goes quiet, a busy one never does. Not detected: NCCL, whose host threads spin while a kernel hangs (CPU time
// keeps growing), and a hang of one rank while the others spin or print.
struct QuietSample {
  int global_rank = -1;
  double cpu_s = 0;           // utime + stime so far
  double last_output_s = -1;  // when it last wrote to stdout/stderr (on the caller's clock), -1: never
};

class QuietWatch {
 public:
  // CPU time below min_cpu_share of the elapsed time does not count as activity (background threads).
  explicit QuietWatch(double min_cpu_share = 0.01) : min_cpu_share_(min_cpu_share) {}
  // Returns how long (seconds) no rank has used CPU or written output, as of now_s.
  double observe(double now_s, const std::vector<QuietSample>& samples);

 private:
  double min_cpu_share_;
  double last_s_ = -1;
  double quiet_since_s_ = -1;
  std::map<int, double> cpu_;
};

}  // namespace ctrun::agent::hang
