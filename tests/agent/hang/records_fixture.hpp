#pragma once
// Records of a one-group job as the detector's, the table's and the summary's tests build them.
#include <cstdint>
#include <vector>

#include "agent/hang/records.hpp"

namespace ctrun::agent::hang::test {

inline constexpr std::uint32_t kAllReduce = 2;

// A rank of a one-group job of `size` ranks (group 0, id 77).
inline RankRecord rank_in(int global, int size, std::uint64_t issued, bool running, double in_state_s,
                          std::uint64_t done = 0, double busy_s = 0) {
  RankRecord r;
  r.global_rank = global;
  r.host = "vm";
  r.local_rank = global;
  r.pid = 4711 + global;
  GroupRecord g;
  g.group_id = 77;
  g.group_rank = global;
  g.group_size = size;
  g.issued = issued;
  g.running = running;
  g.seq = running ? issued - 1 : (issued ? issued - 1 : 0);
  g.op = kAllReduce;
  g.in_state_s = in_state_s;
  g.done = done;
  g.busy_s = busy_s;
  r.groups.push_back(g);
  return r;
}

// Ranks 0,1,3 wait in all_reduce #3 for `waited` s; rank 2 finished #2 and has not issued #3.
inline std::vector<RankRecord> rank2_missing(double waited) {
  return {rank_in(0, 4, 4, true, waited), rank_in(1, 4, 4, true, waited - 0.5), rank_in(2, 4, 3, false, waited + 1),
          rank_in(3, 4, 4, true, waited - 0.2)};
}

// A pipeline: rank 1 waits in a recv from rank 0 while rank 0 is inside all_reduce #5 of another group.
inline std::vector<RankRecord> rank1_in_recv(double waited, std::uint64_t p2p_done = 4) {
  std::vector<RankRecord> ranks = {rank_in(0, 2, 5, false, 1), rank_in(1, 2, 5, false, waited)};
  GroupRecord& g = ranks[1].groups[0];
  g.p2p_pending = 1;
  g.p2p_recv = true;
  g.p2p_peer = 0;
  g.p2p_bytes = 4096;
  g.p2p_s = waited;
  g.p2p_done = p2p_done;
  GroupRecord other = rank_in(0, 1, 6, true, waited).groups[0];  // a group of its own: no collective hang
  other.group_id = 88;
  other.ordinal = 1;
  ranks[0].groups.push_back(other);
  return ranks;
}

}  // namespace ctrun::agent::hang::test
