#include "agent/checkpoint/summary_view.hpp"

#include <fmt/format.h>

#include "agent/base/memory_size.hpp"

namespace ctrun::agent::checkpoint {
namespace {

bool shown(const CheckpointKeeper::Summary& s) { return s.on || s.bytes > 0 || s.newest_step >= 0; }

std::string step_words(std::int64_t step) { return step >= 0 ? std::to_string(step) : "none"; }

}  // namespace

std::string summary_text(const CheckpointKeeper::Summary& s) {
  if (!shown(s)) return "";
  std::string out = fmt::format(
      "checkpoints on this node{}: newest step every local rank holds {}, oldest held {}; "
      "{} of {} (--checkpoint-memory)\n",
      s.on ? "" : " (off for this attempt)", step_words(s.newest_step), step_words(s.oldest_step),
      format_bytes(s.bytes), format_bytes(s.limit));
  if (s.replicas > 0) {
    const std::int64_t lag = s.replicated_step >= 0 ? s.newest_step - s.replicated_step : s.newest_step + 1;
    out += fmt::format("  replicated to {} other node(s): step {}, {} step(s) behind{}; {} sent, {} received\n",
                       s.replicas, step_words(s.replicated_step), lag < 0 ? 0 : lag,
                       s.replicated_age_s >= 0 ? fmt::format(", {:.1f} s ago", s.replicated_age_s) : "",
                       format_bytes(s.bytes_sent), format_bytes(s.bytes_received));
  } else if (s.bytes_received > 0) {
    out += fmt::format("  replicas received from other nodes: {}\n", format_bytes(s.bytes_received));
  }
  if (s.spilling) out += fmt::format("  --checkpoint-dir: newest step on disk {}\n", step_words(s.spilled_step));
  return out;
}

nlohmann::json summary_json(const CheckpointKeeper::Summary& s) {
  if (!shown(s)) return nullptr;
  nlohmann::json out = {{"on", s.on},
                        {"newest_step", s.newest_step},
                        {"oldest_step", s.oldest_step},
                        {"bytes", s.bytes},
                        {"limit_bytes", s.limit},
                        {"replicas", s.replicas},
                        {"replicated_step", s.replicated_step},
                        {"replicated_age_s", s.replicated_age_s >= 0 ? nlohmann::json(s.replicated_age_s) : nullptr},
                        {"bytes_sent", s.bytes_sent},
                        {"bytes_received", s.bytes_received}};
  if (s.spilling) out["spilled_step"] = s.spilled_step;
  return out;
}

}  // namespace ctrun::agent::checkpoint
