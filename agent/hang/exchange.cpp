#include "agent/hang/exchange.hpp"

#include <set>

#include "agent/hang/keys.hpp"
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
