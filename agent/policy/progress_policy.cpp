#include "agent/policy/progress_policy.hpp"

#include <fmt/format.h>

namespace ctrun::agent {

bool made_progress(std::optional<std::int64_t> start_step, std::optional<std::int64_t> end_step,
                   std::uint64_t collectives) {
  if (end_step || start_step) return end_step && (!start_step || *end_step > *start_step);
  return collectives >= kCollectivesForProgress;
}

void ProgressCount::attempt_ended(std::optional<std::int64_t> end_step, std::uint64_t collectives,
                                  bool failure_seen) {
  if (made_progress(start_step_, end_step, collectives))
    failed_in_a_row_ = 0;
  else if (failure_seen)
    ++failed_in_a_row_;
}

std::string ProgressCount::baseline(std::uint64_t collectives) const {
  if (start_step_) return fmt::format("no checkpoint step newer than {}", *start_step_);
  return fmt::format("no checkpoint step committed by every local rank, {} collective(s) completed where {} would count",
                     collectives, kCollectivesForProgress);
}

}  // namespace ctrun::agent
