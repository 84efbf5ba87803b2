#pragma once
// Two levels: a group whose ranks span several hosts passes messages through shared memory among the ranks of
// each host (the "local" level) and over tcp between hosts (the "cross" level, one representative per host: its
// lowest rank, or the root where the op has one on that host). Each two_level_*.cpp runs one op as local step,
// cross step among the representatives, local step; every step runs the algorithm its level's choice gives
// (the size table on the local level, the cost model on the cross level: cost_model.hpp), through Levels.
// two_level_table() lists those ops: dispatch, the prediction of their local steps and comm_sim's ops.

#include <span>
#include <string>
#include <vector>

#include "comm/algorithms/context.hpp"
#include "comm/algorithms/cost_model.hpp"
#include "comm/algorithms/table.hpp"

namespace ctrun::comm::algorithms {

// Which ranks share a host, from one identity string per group rank (equal strings: one host).
struct HostLayout {
  std::vector<std::vector<int>> hosts;  // group ranks of each host, ascending; hosts ordered by their lowest rank
  std::vector<int> host_of;             // group rank -> host
  std::vector<int> local_index;         // group rank -> its index among its host's ranks

  static HostLayout from_identities(const std::vector<std::string>& identities);
  bool single_host() const { return hosts.size() == 1; }
  bool one_rank_per_host() const { return hosts.size() == host_of.size(); }
  // The largest number of ranks on one host.
  int max_ranks_per_host() const;
};

// What the two-level algorithms run on; the cpu backend implements it for one op at a time.
class Levels {
 public:
  virtual ~Levels() = default;
  virtual const HostLayout& layout() const = 0;
  virtual int rank() const = 0;  // group rank
  int host() const { return layout().host_of[static_cast<std::size_t>(rank())]; }
  int local_rank() const { return layout().local_index[static_cast<std::size_t>(rank())]; }
  int local_size() const { return static_cast<int>(layout().hosts[static_cast<std::size_t>(host())].size()); }
  int host_count() const { return static_cast<int>(layout().hosts.size()); }
  // One representative per host: the lowest rank of each, except `rank` for its own host (-1: none).
  std::vector<int> representatives(int rank = -1) const;

  // Runs `op` among this host's ranks (roots: local indexes) with the local level's algorithm.
  virtual void run_local(OpKind op, const OpArgs& args) = 0;
  // Runs `op` among `reps` (one group rank per host; this rank must be one; roots and blocks: by host index) with
  // the cross level's algorithm, the cost model's choice for the whole op's per-rank message.
  virtual void run_cross(OpKind op, const OpArgs& args, const std::vector<int>& reps) = 0;
  // Memory for packing, kept across ops (distinct from what the levels' algorithms use).
  virtual char* pack(std::size_t bytes) = 0;
};

void two_level_all_reduce(Levels& lv, const OpArgs& args);
void two_level_broadcast(Levels& lv, const OpArgs& args);
void two_level_reduce(Levels& lv, const OpArgs& args);
void two_level_all_gather(Levels& lv, const OpArgs& args);
void two_level_reduce_scatter(Levels& lv, const OpArgs& args);
void two_level_barrier(Levels& lv, const OpArgs& args);

// One row per op that runs in two levels (every other op runs flat over the group's tcp transport): the function
// that runs it and the time of its steps inside the hosts (predict_two_level adds the cross step's cost row).
struct TwoLevelRow {
  OpKind op;
  void (*run)(Levels& lv, const OpArgs& args);
  double (*local_seconds)(const Shape& shape, const LinkCost& local);
};
std::span<const TwoLevelRow> two_level_table();
// The row of `op`, or null when the op runs flat.
const TwoLevelRow* find_two_level(OpKind op);

// The whole op on a two-level group (its steps inside the hosts at `local`, its row here, + the cross step with
// `algorithm` at `net`, cost_model.hpp's row); a flat group over tcp when ranks_per_node == 1.
double predict_two_level(OpKind op, Algorithm algorithm, const Shape& shape, const LinkCost& net,
                         const LinkCost& local);

}  // namespace ctrun::comm::algorithms
