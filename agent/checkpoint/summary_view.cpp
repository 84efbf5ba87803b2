#include "agent/checkpoint/summary_view.hpp"

#include <optional>

#include <fmt/format.h>

#include "agent/base/memory_size.hpp"

namespace ctrun::agent::checkpoint {
namespace {

bool shown(const CheckpointKeeper::Summary& s) { return s.on || holds_something(s); }

std::string step_words(std::int64_t step) { return step >= 0 ? std::to_string(step) : "none"; }

// What a node holds, as both its own line and group rank 0's line for it say it.
std::string held_words(const CheckpointKeeper::Summary& s) {
  return fmt::format("newest step every local rank holds {}, oldest held {}; {} of {}", step_words(s.newest_step),
                     step_words(s.oldest_step), format_bytes(s.bytes), format_bytes(s.limit));
}

// How many steps the newest copied one is behind the newest held one (every held step when none was copied).
std::int64_t lag_steps(const CheckpointKeeper::Summary& s) {
  const std::int64_t lag = s.replicated_step >= 0 ? s.newest_step - s.replicated_step : s.newest_step + 1;
  return lag < 0 ? 0 : lag;
}

// A record another node published (node_record), or nullopt when it is not one this version reads.
std::optional<CheckpointKeeper::Summary> parse_record(const std::string& text) {
  const auto j = nlohmann::json::parse(text, nullptr, false);
  if (j.is_discarded() || !(j.is_null() || j.is_object())) return std::nullopt;
  CheckpointKeeper::Summary s;
  if (j.is_null()) return s;
  try {
    s.on = j.value("on", false);
    s.newest_step = j.value("newest_step", std::int64_t{-1});
    s.oldest_step = j.value("oldest_step", std::int64_t{-1});
    s.bytes = j.value("bytes", std::uint64_t{0});
    s.limit = j.value("limit_bytes", std::uint64_t{0});
    s.replicas = j.value("replicas", 0);
    s.replicated_step = j.value("replicated_step", std::int64_t{-1});
    if (j.contains("replicated_age_s") && j["replicated_age_s"].is_number())
      s.replicated_age_s = j["replicated_age_s"].get<double>();
    s.bytes_sent = j.value("bytes_sent", std::uint64_t{0});
    s.bytes_received = j.value("bytes_received", std::uint64_t{0});
    s.spilling = j.contains("spilled_step");
    s.spilled_step = j.value("spilled_step", std::int64_t{-1});
  } catch (const nlohmann::json::exception&) {
    return std::nullopt;
  }
  return s;
}

std::string node_line(int node, const std::map<int, std::string>& records) {
  const auto it = records.find(node);
  if (it == records.end()) return fmt::format("  node {}: has not published its checkpoints yet\n", node);
  const auto s = parse_record(it->second);
  if (!s) return fmt::format("  node {}: its record is unreadable (run the same ctrun version on every node)\n", node);
  if (!shown(*s)) return fmt::format("  node {}: in-memory checkpoints off\n", node);
  std::string out = fmt::format("  node {}{}: {}", node, s->on ? "" : " (off for this attempt)", held_words(*s));
  if (s->replicas > 0)
    out += fmt::format("; replicated step {}, {} step(s) behind", step_words(s->replicated_step), lag_steps(*s));
  return out + "\n";
}

}  // namespace

bool holds_something(const CheckpointKeeper::Summary& s) { return s.bytes > 0 || s.newest_step >= 0; }

std::string summary_text(const CheckpointKeeper::Summary& s) {
  if (!shown(s)) return "";
  std::string out = fmt::format("checkpoints on this node{}: {} (--checkpoint-memory)\n",
                                s.on ? "" : " (off for this attempt)", held_words(s));
  if (s.replicas > 0) {
    out += fmt::format("  replicated to {} other node(s): step {}, {} step(s) behind{}; {} sent, {} received\n",
                       s.replicas, step_words(s.replicated_step), lag_steps(s),
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

std::string node_record(const CheckpointKeeper::Summary& s) { return summary_json(s).dump(); }

std::string nodes_text(const std::map<int, std::string>& records, int self, int nodes) {
  if (nodes <= 1) return "";
  std::string out = "checkpoints on the other nodes (as each published them, every 2 s or so):\n";
  for (int node = 0; node < nodes; ++node)
    if (node != self) out += node_line(node, records);
  return out;
}

nlohmann::json nodes_json(const std::map<int, std::string>& records, int self, int nodes) {
  nlohmann::json out = nlohmann::json::array();
  for (int node = 0; node < nodes; ++node) {
    if (node == self) continue;
    nlohmann::json entry = {{"group_rank", node}, {"published", records.count(node) > 0}};
    if (const auto it = records.find(node); it != records.end()) {
      if (const auto s = parse_record(it->second)) {
        const auto fields = summary_json(*s);
        if (fields.is_object()) {
          entry.update(fields);
        } else {
          entry["on"] = false;
        }
      } else {
        entry["unreadable"] = true;
      }
    }
    out.push_back(std::move(entry));
  }
  return out;
}

}  // namespace ctrun::agent::checkpoint
