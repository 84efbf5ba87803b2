#pragma once
// Agreements the agents of one c10d round make through the round's store (RoundInfo::store, scoped to the round).
//
// The restart count: a worker failure on one node consumes a restart there, while the other nodes follow into the
// new round as a membership change (no restart consumed, as torchrun). Workers of one round must still agree on
// TORCHELASTIC_RESTART_COUNT: torch <= 2.0 workers prefix every key of the shared agent store with
// /worker/attempt_<count>, so differing counts would never meet. The round's count is the largest any member holds.

#include <chrono>
#include <functional>
#include <optional>

#include "store/store.hpp"

namespace ctrun::rdzv {

// Every member of the round calls this once; returns max(mine over all group_world_size members), or nullopt when
// `round_over()` turns true while waiting (a member died before it arrived: re-rendezvous). One compare-and-set
// (uncontended: one try), one counter add, one wait (in slices, to ask round_over()). Throws store::StoreError
// (TimeoutError when a member never arrives within timeout).
std::optional<int> agree_restart_count(store::Store& round_store, int mine, int group_world_size,
                                       store::Duration timeout, const std::function<bool()>& round_over);

}  // namespace ctrun::rdzv
