#include "agent/hang/auto_timeout.hpp"

#include <algorithm>
#include <cstdio>
#include <stdexcept>

#include "common/text.hpp"

namespace ctrun::agent::hang {
namespace {

double seconds(const std::string& text, const std::string& what) {
  std::size_t used = 0;
  double v = 0;
  try {
    v = std::stod(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != text.size() || text.empty() || !(v > 0))
    throw std::invalid_argument("auto's " + what + " '" + text + "' must be a positive number of seconds");
  return v;
}

std::string number(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

}  // namespace

std::optional<AutoTimeout> parse_auto_timeout(const std::string& text) {
  const auto parts = text::split(text, ':');
  if (parts.empty() || parts[0] != "auto") return std::nullopt;
  if (parts.size() > 3)
    throw std::invalid_argument("'" + text + "': give auto, auto:FLOOR or auto:FLOOR:CEILING (seconds)");
  AutoTimeout a;
  if (parts.size() >= 2) a.floor_s = seconds(parts[1], "floor");
  if (parts.size() == 3) a.ceiling_s = seconds(parts[2], "ceiling");
  if (a.floor_s > a.ceiling_s)
    throw std::invalid_argument("'" + text + "': the floor (" + number(a.floor_s) + " s) is above the ceiling (" +
                                number(a.ceiling_s) + " s)");
  return a;
}

void TimeoutLearner::reset() {
  tracks_.clear();
  longest_gap_s_ = 0;
  completed_ = 0;
}

Learned TimeoutLearner::observe(double now_s, const std::vector<RankRecord>& local) {
  for (const auto& r : local) {
    for (const auto& g : r.groups) {
      auto [it, fresh] = tracks_.try_emplace({r.global_rank, g.group_id}, Track{.done = g.done, .first_done = g.done});
      Track& t = it->second;
      if (g.done < t.done) t = Track{.done = g.done, .first_done = g.done};  // a new group in the same slot
      if (fresh || g.done == t.done) continue;
      // New completions since the last look. Between ops, the last one ended in_state_s ago; inside one, the one
      // before it ended no later than this one started.
      const double end_s = now_s - g.in_state_s;
      if (t.last_end_s >= 0) longest_gap_s_ = std::max(longest_gap_s_, end_s - t.last_end_s);
      t.last_end_s = end_s;
      t.done = g.done;
      completed_ = std::max(completed_, t.done - t.first_done);
    }
  }
  return current();
}

Learned TimeoutLearner::current() const {
  Learned l{.longest_gap_s = longest_gap_s_,
            .completed = completed_,
            .warm = completed_ >= config_.warmup,
            .multiple = config_.multiple,
            .floor_s = config_.floor_s,
            .ceiling_s = config_.ceiling_s};
  l.timeout_s =
      l.warm ? std::clamp(config_.multiple * longest_gap_s_, config_.floor_s, config_.ceiling_s) : config_.ceiling_s;
  return l;
}

}  // namespace ctrun::agent::hang
