#include <algorithm>
#include <map>

#include "comm/algorithms/two_level.hpp"

namespace ctrun::comm::algorithms {

HostLayout HostLayout::from_identities(const std::vector<std::string>& identities) {
  HostLayout l;
  std::map<std::string, int> index;
  for (std::size_t r = 0; r < identities.size(); ++r) {
    auto [it, fresh] = index.emplace(identities[r], static_cast<int>(l.hosts.size()));
    if (fresh) l.hosts.emplace_back();
    auto& members = l.hosts[static_cast<std::size_t>(it->second)];
    l.host_of.push_back(it->second);
    l.local_index.push_back(static_cast<int>(members.size()));
    members.push_back(static_cast<int>(r));
  }
  return l;
}

int HostLayout::max_ranks_per_host() const {
  std::size_t m = 0;
  for (const auto& h : hosts) m = std::max(m, h.size());
  return static_cast<int>(m);
}

std::vector<int> Levels::representatives(int rank) const {
  std::vector<int> reps;
  for (const auto& h : layout().hosts) reps.push_back(h[0]);
  if (rank >= 0) reps[static_cast<std::size_t>(layout().host_of[static_cast<std::size_t>(rank)])] = rank;
  return reps;
}

}  // namespace ctrun::comm::algorithms
