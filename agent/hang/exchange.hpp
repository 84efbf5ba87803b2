#pragma once
// The hang exchange between the nodes of a round, through the round's store (docs/hang.md): each node writes its
// summary under its own key when it is due (summary.hpp, PublishPacer) and appends its group rank to the list of
// changed nodes; the agent of group rank 0 takes that list (read, and emptied with one compare-and-set: an append
// between the two leaves the list for the next read) and reads only the listed summaries, in one request, and
// publishes its verdicts in one key; the other nodes read that key. Every read is a bounded number of requests,
// whatever the number of nodes, and a running job's summaries come at a bounded rate: O(N) for the whole job.
//
// Split for the loop: what an exchange does is decided there (ExchangeStep); run_exchange() makes its store calls
// on the helper lane (or a bench's thread) and hands back what it read.

#include <map>
#include <string>

#include "store/store.hpp"

namespace ctrun::agent::hang {

class HangWatch;

struct ExchangeStep {
  std::string summary;         // this node's summary to write ("": none due)
  std::string verdicts;        // group rank 0: its verdicts, written on each of its reads
  bool aggregate = false;      // group rank 0: read the summaries that changed
  bool read_verdicts = false;  // another node: read group rank 0's verdicts
  bool any() const { return !summary.empty() || aggregate || read_verdicts; }
};

struct ExchangeResult {
  std::map<int, std::string> summaries;  // group rank -> its summary (group rank 0's read)
  std::string verdicts;                  // "" when none was read
};

// What node `self` of `nodes` exchanges at a tick (the loop's side, HangSupervisor's; scale_bench drives the same):
// its summary when the watch's pacer says so; group rank 0 reads the changed summaries and writes its verdicts every
// kReadEvery s. Verdicts only fail ranks with a hang timeout (`verdicts_fail`), so only then does another node read
// them: with each summary it writes, and while it is stalled (a hang in the making: the verdict naming its rank is
// coming) every max(kReadEvery, nodes / 2,000 s), at most ~2,000 reads a second from the whole job. `last_read`: the
// node's last read, kept by the caller (updated when this step reads). The step is empty (any() false) when nothing
// is due.
inline constexpr double kReadEvery = 2;
ExchangeStep next_step(HangWatch& watch, double now_s, int self, int nodes, bool verdicts_fail, double& last_read);
// The loop's side of what a step read: the summaries and the verdicts into the watch.
void take(HangWatch& watch, const ExchangeResult& got, double now_s);

// Blocking: the store calls of one step of node `self` of a round of `nodes`. Throws store::StoreError.
ExchangeResult run_exchange(store::Store& store, int self, int nodes, const ExchangeStep& step);

// The group ranks in a changed list ("3,0,7,"), once each, without `self`; entries out of range are skipped.
std::vector<int> changed_ranks(const std::string& list, int self, int nodes);

}  // namespace ctrun::agent::hang
