#pragma once
// A group's progress record (common/progress.hpp) for any backend: a slot of this process's row, when the agent
// named a region and the setting is on. The members agree on the group's id with one compare_set each (the first
// proposal wins): no member waits for another here, so a member without a region (or with records off) costs the
// others nothing. A failure leaves the group unrecorded, never failed.

#include "comm/backend.hpp"
#include "common/progress.hpp"

namespace ctrun::comm {

progress::SlotWriter claim_progress_slot(const BackendContext& ctx);

}  // namespace ctrun::comm
