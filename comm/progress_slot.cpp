#include "comm/progress_slot.hpp"

#include <cstdlib>
#include <random>
#include <string>

#include "common/log.hpp"

namespace ctrun::comm {

progress::SlotWriter claim_progress_slot(const BackendContext& ctx) {
  if (!ctx.config.progress || !progress::attached_region()) return {};
  std::random_device rd;
  std::uint64_t proposal = 0;
  while (proposal == 0) proposal = (static_cast<std::uint64_t>(rd()) << 32) ^ rd();
  try {
    const std::string id = ctx.store->compare_set("progress/id", "", std::to_string(proposal));
    return progress::claim_slot(std::strtoull(id.c_str(), nullptr, 10), ctx.rank, ctx.size);
  } catch (const std::exception& e) {
    // A diagnostic never fails the group: it runs unrecorded.
    log::get("comm")->warn("comm: progress records off for this group: {}", e.what());
    return {};
  }
}

}  // namespace ctrun::comm
