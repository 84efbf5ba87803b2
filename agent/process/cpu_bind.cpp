#include "agent/process/cpu_bind.hpp"

#include <sched.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

namespace ctrun::agent {

std::vector<int> parse_cpu_list(const std::string& text) {
  std::vector<int> out;
  std::size_t start = 0;
  while (start < text.size()) {
    std::size_t end = text.find(',', start);
    std::string item = text.substr(start, end == std::string::npos ? std::string::npos : end - start);
    if (!item.empty() && item.back() == '\n') item.pop_back();
    if (!item.empty()) {
      auto dash = item.find('-');
      try {
        int lo = std::stoi(item.substr(0, dash));
        int hi = dash == std::string::npos ? lo : std::stoi(item.substr(dash + 1));
        for (int c = lo; c <= hi; ++c) out.push_back(c);
      } catch (const std::exception&) {
      }
    }
    if (end == std::string::npos) break;
    start = end + 1;
  }
  return out;
}

std::vector<int> allowed_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  std::vector<int> out;
  if (::sched_getaffinity(0, sizeof set, &set) != 0) return out;
  for (int c = 0; c < CPU_SETSIZE; ++c) {
    if (CPU_ISSET(c, &set)) out.push_back(c);
  }
  return out;
}

std::vector<std::vector<int>> numa_nodes(const std::vector<int>& allowed, const std::string& sys_node_dir) {
  std::vector<std::pair<int, std::vector<int>>> found;
  std::error_code ec;
  for (auto it = std::filesystem::directory_iterator(sys_node_dir, ec);
       !ec && it != std::filesystem::directory_iterator(); it.increment(ec)) {
    std::string name = it->path().filename().string();
    if (name.rfind("node", 0) != 0 || name.size() == 4 || !std::isdigit(static_cast<unsigned char>(name[4]))) {
      continue;
    }
    std::ifstream in(it->path() / "cpulist");
    std::string text;
    std::getline(in, text);
    std::vector<int> cpus;
    for (int c : parse_cpu_list(text)) {
      if (std::find(allowed.begin(), allowed.end(), c) != allowed.end()) cpus.push_back(c);
    }
    if (!cpus.empty()) found.emplace_back(std::stoi(name.substr(4)), std::move(cpus));
  }
  std::sort(found.begin(), found.end());
  std::vector<std::vector<int>> nodes;
  for (auto& [id, cpus] : found) nodes.push_back(std::move(cpus));
  if (nodes.empty()) nodes.push_back(allowed);
  return nodes;
}

std::vector<int> cpu_slice(CpuBind mode, int local_rank, int nproc, const std::vector<int>& allowed,
                           const std::vector<std::vector<int>>& nodes) {
  if (mode == CpuBind::kNone || allowed.empty() || nproc <= 0) return {};
  if (mode == CpuBind::kNuma) return nodes.at(static_cast<std::size_t>(local_rank) % nodes.size());
  // core: contiguous, as even as possible; with more ranks than CPUs, ranks share CPUs round-robin.
  int n = static_cast<int>(allowed.size());
  if (nproc >= n) return {allowed[static_cast<std::size_t>(local_rank % n)]};
  int begin = static_cast<int>(static_cast<long long>(local_rank) * n / nproc);
  int end = static_cast<int>(static_cast<long long>(local_rank + 1) * n / nproc);
  return std::vector<int>(allowed.begin() + begin, allowed.begin() + end);
}

}  // namespace ctrun::agent
