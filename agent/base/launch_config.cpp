#include "agent/base/launch_config.hpp"

namespace ctrun::agent {

int StdSpec::for_rank(int local_rank) const {
  if (!is_map) return all;
  auto it = per_rank.find(local_rank);
  return it == per_rank.end() ? 0 : it->second;
}

}  // namespace ctrun::agent
