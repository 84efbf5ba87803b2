#pragma once
// What the agent knows about one rank's collectives: a copy of its progress record (common/progress.hpp) with
// every time turned into a duration, so records of ranks on other nodes (through the node summaries,
// summary.hpp) mean the same as local ones. The detector (detector.hpp), the summary and the live table
// (table.hpp) all work on these.

#include <cstdint>
#include <string>
#include <vector>

namespace ctrun::agent::hang {

// One rank's record of one group.
struct GroupRecord {
  std::uint64_t group_id = 0;  // agreed by the group's members
  int group_rank = 0;
  int group_size = 0;
  int ordinal = 0;           // the rank's n-th group ("group 0" is usually the world group)
  std::uint64_t issued = 0;  // collectives issued: #issued-1 is the last one
  bool running = false;      // inside op #seq
  std::uint64_t seq = 0;     // the running op, or the last one run
  std::uint32_t op = 0;      // comm's op kind (op_name)
  std::uint32_t dtype = 0;
  std::uint64_t bytes = 0;
  double in_state_s = 0;  // how long it has been running #seq (running) or idle since its last op
  int wait_peer = -1;     // group rank the op waits for now (-1: several / unknown)
  std::uint32_t wait_step = 0;
  std::uint64_t done = 0;    // ops finished
  std::uint64_t failed = 0;  // of which failed
  double busy_s = 0;         // total time inside ops
  // Point-to-point ops (not numbered collectives): how many are pending, the oldest of them, how many finished.
  std::uint32_t p2p_pending = 0;
  bool p2p_recv = false;  // the oldest pending is a recv (else a send)
  int p2p_peer = -1;      // its peer's group rank
  std::uint64_t p2p_bytes = 0;
  double p2p_s = 0;  // how long the oldest has been pending
  std::uint64_t p2p_done = 0;

  // Has this rank entered (issued) collective #k of the group?
  bool entered(std::uint64_t k) const { return issued > k; }
};

struct RankRecord {
  int global_rank = -1;
  std::string host;
  int local_rank = 0;
  int pid = 0;
  int restarts = 0;            // restarts of the job so far (the attempt)
  std::string node;            // the node whose summary it came from (its group rank); "" for this node's own ranks
  std::uint32_t overflow = 0;  // groups past progress::kMaxGroups, not recorded
  std::uint64_t retired_done = 0;  // the most ops a group of this rank that went (its slot freed) had finished
  std::vector<GroupRecord> groups;
};

// The global rank of group rank `group_rank` of group `group_id`, from whichever rank's record of that group shows
// it; -1 when none is seen.
inline int global_rank_of(const std::vector<RankRecord>& ranks, std::uint64_t group_id, int group_rank) {
  for (const auto& r : ranks) {
    for (const auto& g : r.groups) {
      if (g.group_id == group_id && g.group_rank == group_rank) return r.global_rank;
    }
  }
  return -1;
}

}  // namespace ctrun::agent::hang
