#pragma once
// A node's records for the rest of the job: each agent publishes one bounded summary of its local ranks through
// the rendezvous store (one key per node, no per-op store traffic), so the agent of group rank 0 sees every
// rank of the job. Durations and counters only, never a wall-clock time: hosts' clocks differ. A reader
// extrapolates ages from when it fetched a summary (RemoteView).
//
// Encoding (text, one record per line, numbers in decimal; version 1):
//   P1 <counter> <restarts> <host>
//   r <global_rank> <local_rank> <pid> <overflow>
//   g <group_id> <group_rank> <group_size> <ordinal> <issued> <running> <seq> <op> <dtype> <bytes> <in_state_ms>
//     <wait_peer> <wait_step> <done> <failed> <busy_ms>            (one line; belongs to the `r` line above it)
//   t <records left out>                                            (only when it had to be cut to kMaxBytes)
// At most kMaxBytes: idle groups are left out first, then whole ranks (the `t` line counts what was cut).

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "agent/hang/records.hpp"

namespace ctrun::agent::hang {

inline constexpr std::size_t kMaxSummaryBytes = 64 * 1024;

struct NodeSummary {
  std::uint64_t counter = 0;  // the publisher's n-th summary: a reader sees whether it is new
  int restarts = 0;
  std::string host;
  std::vector<RankRecord> ranks;
  std::uint64_t cut = 0;  // records left out to stay within kMaxSummaryBytes
};

std::string encode(const NodeSummary& summary, std::size_t max_bytes = kMaxSummaryBytes);
// nullopt when `text` is not a summary of this version (a reader then ignores that node's records).
std::optional<NodeSummary> decode(const std::string& text);

// The verdicts the agent of group rank 0 publishes for the others (one key): the global ranks to fail and, one
// per verdict, the words for why. Encoded as the ranks on the first line ("3 5 "), then one note per line;
// empty when there is none.
struct Verdicts {
  std::vector<int> ranks;
  std::vector<std::string> notes;
};
std::string encode(const Verdicts& verdicts);
// nullopt when `text` holds no verdict.
std::optional<Verdicts> decode_verdicts(const std::string& text);

// When a node publishes: when its records changed in more than their ages, at most every
// max(min_interval_s, nodes / max_writes_per_s) seconds (so the store, etcd included, sees at most
// max_writes_per_s summary writes per second from the whole job), and at least every heartbeat_s. A stalled node
// (stalled(): a rank of it made no progress for a while, a hang in the making) publishes a change after
// min_interval_s whatever the number of nodes: when a job hangs every node stalls, so group rank 0 holds every
// node's fresh summary by the time a hang is seen, at any size, while a job that runs costs the store the bounded
// rate above.
class PublishPacer {
 public:
  double min_interval_s = 2;
  double max_writes_per_s = 20;
  double heartbeat_s = 60;

  // `content`: the summary encoded with its ages left out (what "changed" compares).
  bool due(double now_s, int nodes, const std::string& content, bool stalled = false);
  void published(double now_s, const std::string& content);

 private:
  double last_s_ = -1;
  std::string last_content_;
};

// The content PublishPacer compares: the summary without ages and counter.
std::string content_of(NodeSummary summary);

// Whether some rank made no progress for `after_s`: every group it has is inside one op, or idle since its last
// one, for longer than that (a rank that finishes ops in any group is making progress). Ranks without records
// never stall.
bool stalled(const std::vector<RankRecord>& ranks, double after_s);

// The reader's side: the latest summary of each node and when it was fetched, ages extrapolated to `now_s`.
class RemoteView {
 public:
  // A summary fetched at now_s (ignored when its counter is not newer than the one held for `node`).
  void update(const std::string& node, const NodeSummary& summary, double now_s);
  void forget(const std::string& node);
  // Every rank of every node held, ages advanced by the time since each summary was fetched.
  std::vector<RankRecord> ranks(double now_s) const;

 private:
  struct Held {
    NodeSummary summary;
    double fetched_s = 0;
  };
  std::map<std::string, Held> nodes_;
};

}  // namespace ctrun::agent::hang
