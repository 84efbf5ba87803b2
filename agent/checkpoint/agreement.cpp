#include "agent/checkpoint/agreement.hpp"

#include <algorithm>

#include "common/text.hpp"
#include "common/worker_env.hpp"

namespace ctrun::agent::checkpoint {

std::string held_keys(int restart_count) {
  return worker_env::attempt_prefix(restart_count) + "/ctrun/checkpoint/held/";
}

std::string encode_steps(const std::vector<std::int64_t>& steps) {
  std::vector<std::string> parts;
  for (auto s : steps) parts.push_back(std::to_string(s));
  return text::join(parts, ",");
}

std::optional<std::int64_t> newest_common_step(const std::vector<std::vector<std::int64_t>>& held_per_rank) {
  if (held_per_rank.empty()) return std::nullopt;
  std::vector<std::int64_t> common = held_per_rank.front();
  std::sort(common.begin(), common.end());
  for (std::size_t r = 1; r < held_per_rank.size() && !common.empty(); ++r) {
    std::vector<std::int64_t> theirs = held_per_rank[r], both;
    std::sort(theirs.begin(), theirs.end());
    std::set_intersection(common.begin(), common.end(), theirs.begin(), theirs.end(), std::back_inserter(both));
    common = std::move(both);
  }
  if (common.empty()) return std::nullopt;
  return common.back();
}

}  // namespace ctrun::agent::checkpoint
