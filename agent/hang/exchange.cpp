#include "agent/hang/exchange.hpp"

#include <algorithm>
#include <set>

#include "agent/hang/keys.hpp"
#include "agent/hang/watch.hpp"
#include "agent/hang/wording.hpp"
#include "common/text.hpp"
#include "rendezvous/peek.hpp"

namespace ctrun::agent::hang {

std::vector<int> changed_ranks(const std::string& list, int self, int nodes) {
  std::set<int> ranks;
  for (const auto& entry : text::split_nonempty(list, ',')) {
    const auto rank = text::parse_int<int>(entry);
    if (rank && *rank != self && *rank >= 0 && *rank < nodes) ranks.insert(*rank);
  }
  return {ranks.begin(), ranks.end()};
}

ExchangeStep next_step(HangWatch& watch, double t, int self, int nodes, bool verdicts_fail, double& last_read) {
  const bool aggregator = self == 0;
  ExchangeStep step;
  step.summary = watch.summary_due(t, nodes).value_or("");
  if (aggregator && t - last_read >= kReadEvery) {
    step.aggregate = true;
    step.verdicts = encode(verdicts_of(watch.detector(), watch.ranks()));
  }
  const double stalled_every = std::max(kReadEvery, static_cast<double>(nodes) / 2000.0);
  step.read_verdicts =
      !aggregator && verdicts_fail && (!step.summary.empty() || (watch.stalled() && t - last_read >= stalled_every));
  if (step.aggregate || step.read_verdicts) last_read = t;
  return step;
}

void take(HangWatch& watch, const ExchangeResult& got, double t) {
  for (const auto& [node, summary] : got.summaries) watch.remote(std::to_string(node), summary, t);
  if (auto v = decode_verdicts(got.verdicts)) watch.remote_verdicts(*v, t);
}

ExchangeResult run_exchange(store::Store& store, int self, int nodes, const ExchangeStep& step) {
  ExchangeResult out;
  if (!step.summary.empty() && self != 0) {  // group rank 0's own is read by nobody
    store.set(keys::node_summary(self), step.summary);
    store.append(keys::changed(), std::to_string(self) + ",");
  }
  if (step.aggregate) {
    store.set(keys::verdicts(), step.verdicts);
    const std::string list = rdzv::peek(store, keys::changed()).value_or("");
    // Taken only if nobody appended meanwhile; else it is read again, with the new entries, next time.
    if (!list.empty() && store.compare_set(keys::changed(), list, "") == "") {
      const auto ranks = changed_ranks(list, self, nodes);
      std::vector<std::string> wanted;
      for (int n : ranks) wanted.push_back(keys::node_summary(n));
      if (!wanted.empty()) {
        const auto values = store.multi_get(wanted);
        for (std::size_t i = 0; i < ranks.size() && i < values.size(); ++i) out.summaries[ranks[i]] = values[i];
      }
    }
  }
  if (step.read_verdicts) out.verdicts = rdzv::peek(store, keys::verdicts()).value_or("");
  return out;
}

}  // namespace ctrun::agent::hang
