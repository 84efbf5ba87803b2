#pragma once
// The two records the protocol stores per node, and the rank assignment that turns one into the other.
// NodeRecord: what a node publishes when it joins a round. Assignment: what the round's completer hands back to
// each node: O(1) bytes each, so a round costs O(N) in total (torchrun's O(N) blob is read by all N nodes).

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "rendezvous/handler.hpp"

namespace ctrun::rdzv {

struct NodeRecord {
  std::string addr;  // sort key (natural order), MASTER_ADDR when rank 0
  std::int64_t pid = 0;
  int local_world_size = 1;
  std::string role = "default";
  std::string store_host;  // this node's worker store
  std::uint16_t store_port = 0;
  std::int64_t arrival = 0;  // arrival index in its round: the last tie-breaker

  std::string describe() const;  // "127.0.0.3 (pid 42)" for messages
  std::string encode() const;
  static NodeRecord decode(std::string_view json);  // throws RendezvousError on malformed input
};

struct Assignment {
  int group_rank = 0;
  int group_world_size = 1;
  int base_global_rank = 0;
  int global_world_size = 1;
  int base_role_rank = 0;
  int role_world_size = 1;
  std::string master_addr;
  std::uint16_t master_port = 0;

  std::string encode() const;
  static Assignment decode(std::string_view json);
};

// What a handler returns for an assignment: the round's number and its agent-level store beside the ranks.
RoundInfo round_info(const Assignment& a, std::uint64_t round = 0, std::shared_ptr<store::Store> store = nullptr);

// "node2" < "node10": digit runs compare as numbers, the rest as bytes. Stable and total (ties: shorter first).
bool natural_less(std::string_view a, std::string_view b);

// Orders the nodes (natural order of addr, then pid, then arrival) and computes each node's assignment with
// torchrun's formulas (prefix sums of local world sizes by group rank; per role likewise).
// Returns assignments in the order of `nodes` and, via `order`, the node index at each group rank.
std::vector<Assignment> assign_ranks(const std::vector<NodeRecord>& nodes, std::vector<int>* order = nullptr);

}  // namespace ctrun::rdzv
