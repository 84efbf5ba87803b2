#include "rendezvous/presence_watch.hpp"

#include <fmt/format.h>

#include "rendezvous/membership.hpp"
#include "rendezvous/records.hpp"

namespace ctrun::rdzv {

std::vector<int> PresenceWatch::watched(const Membership& m) {
  std::vector<int> out;
  for (int i = 1; i <= kWatchWindow && i < m.members; ++i) out.push_back((m.rank + i) % m.members);
  return out;
}

std::vector<int> PresenceWatch::poll(const Membership& m) {
  if (round_ != m.round) {
    round_ = m.round;
    seen_.clear();
    done_.clear();
  }
  std::vector<int> ranks;
  std::vector<std::string> keys;
  for (int r : watched(m)) {
    if (done_.count(r) != 0) continue;
    ranks.push_back(r);
    keys.push_back(keys_.alive(m.round, r));
  }
  std::vector<int> declared;
  if (keys.empty()) return declared;
  if (store_.check(keys)) {  // the common case: one read
    seen_.insert(ranks.begin(), ranks.end());
    return declared;
  }
  for (std::size_t i = 0; i < ranks.size(); ++i) {
    const int r = ranks[i];
    if (store_.check({keys[i]})) {
      seen_.insert(r);
    } else if (seen_.count(r) != 0) {
      done_.insert(r);
      if (store_.check({keys_.exit(m.round, r)}) || store_.check({keys_.exit_done(m.round)}) ||
          store_.check({keys_.closed()}))
        continue;  // it left, or the round or the run ended: released on purpose
      declare(m, r);
      declared.push_back(r);
    }
  }
  return declared;
}

void PresenceWatch::declare(const Membership& m, int rank) {
  auto who = NodeRecord::decode(store_.get(keys_.member(m.round, rank))).describe();
  mark_exit(store_, keys_, m.round, rank, m.members, "dead", kOverDead,
            fmt::format("node {} (group rank {}) is gone: its etcd lease expired (no keep-alive for {} s: its agent "
                        "exited or was killed, or lost etcd)",
                        who, rank, ttl_.count()));
}

}  // namespace ctrun::rdzv
