#pragma once
// Several nodes: each agent publishes a small bounded record of its own in the round's store (what its in-memory
// checkpoints hold, for now), and the agent of group rank 0 reads every other node's latest record of the attempt for
// its live view. A record of "" is not published, and group rank 0 reads the others' only while it publishes one
// itself: a job with nothing to show pays no store op for it. Paced: a node writes its record every max(2 s, nodes /
// 20 s) (the whole job: at most 20 writes a second), and appends its group rank to the attempt's index the first
// time; group rank 0 reads the index and every listed record in two requests every 2 s. One exchange at a time, on
// the helper lane.

#include <functional>
#include <map>
#include <memory>
#include <string>

#include "rendezvous/handler.hpp"
#include "store/store.hpp"

namespace ctrun::agent {
class HelperLane;
}

namespace ctrun::agent::status {

// The store calls of one exchange of node `self` of `nodes` (on the helper lane, or a bench's thread): its record
// (`write`), its entry in the attempt's index (`index`, the first write), and on group rank 0 (`read`) the index and
// every listed node's record (group rank -> record). Throws store::StoreError.
struct RecordsStep {
  std::string record;
  bool write = false, index = false, read = false;
};
std::map<int, std::string> exchange_records(store::Store& store, int restart_count, int self, int nodes,
                                            const RecordsStep& step);

class NodeRecords {
 public:
  // `record`: this node's record, called on the loop; `received`: on group rank 0, every other node's latest record
  // of the attempt (group rank -> record; a node that has not published in this attempt is absent), on the loop.
  NodeRecords(HelperLane& lane, std::function<std::string()> record,
              std::function<void(std::map<int, std::string> records)> received);
  ~NodeRecords();

  void begin_attempt(std::uint64_t attempt, int restart_count, const rdzv::RoundInfo& round);
  void end_attempt();
  // The loop's clock, in seconds: exchanges when one is due.
  void tick(double now_s);

 private:
  struct State;
  std::shared_ptr<State> state_;  // the lane's continuation holds it: it outlives the object if it must
};

}  // namespace ctrun::agent::status
