#include "agent/checkpoint/layout.hpp"
#include "common/text.hpp"

#include <charconv>

namespace ctrun::agent::checkpoint {
namespace {

// The whole of `digits` as a non-negative number.
template <typename T>
std::optional<T> whole_number(std::string_view digits) {
  if (digits.empty() || digits.front() == '-') return std::nullopt;
  return text::parse_int<T>(digits);
}

}  // namespace

std::string job_dir_name(int agent_pid) { return std::string(kDirPrefix) + std::to_string(agent_pid); }
std::string rank_dir_name(int global_rank) { return std::string(kRankPrefix) + std::to_string(global_rank); }
std::string replica_dir_name(int global_rank) { return std::string(kReplicaPrefix) + std::to_string(global_rank); }
std::string step_file_name(std::int64_t step) {
  return std::string(kStepPrefix) + std::to_string(step) + std::string(kStepSuffix);
}

std::optional<int> agent_pid_of(std::string_view name) {
  if (!name.starts_with(kDirPrefix)) return std::nullopt;
  auto pid = whole_number<int>(name.substr(kDirPrefix.size()));
  if (pid && *pid <= 0) return std::nullopt;
  return pid;
}

std::optional<int> rank_of(std::string_view name) {
  if (!name.starts_with(kRankPrefix)) return std::nullopt;
  return whole_number<int>(name.substr(kRankPrefix.size()));
}

std::optional<int> replica_rank_of(std::string_view name) {
  if (!name.starts_with(kReplicaPrefix)) return std::nullopt;
  return whole_number<int>(name.substr(kReplicaPrefix.size()));
}

std::optional<std::int64_t> step_of(std::string_view name) {
  if (!name.starts_with(kStepPrefix) || !name.ends_with(kStepSuffix)) return std::nullopt;
  return whole_number<std::int64_t>(
      name.substr(kStepPrefix.size(), name.size() - kStepPrefix.size() - kStepSuffix.size()));
}

bool is_partial(std::string_view name) { return name.starts_with(kPartialPrefix); }

}  // namespace ctrun::agent::checkpoint
