#include "agent/checkpoint/memory_limit.hpp"

#include <sys/statvfs.h>

#include <algorithm>
#include <fstream>
#include <sstream>

#include <fmt/format.h>

#include "agent/base/memory_size.hpp"

namespace ctrun::agent::checkpoint {

MemoryFacts read_memory_facts(const std::string& root) {
  MemoryFacts facts;
  std::ifstream meminfo("/proc/meminfo");
  for (std::string line; std::getline(meminfo, line);) {
    std::istringstream words(line);
    std::string key;
    std::uint64_t kib = 0;
    if (words >> key >> kib && key == "MemTotal:") {
      facts.mem_total = kib * 1024;
      break;
    }
  }
  struct statvfs fs {};
  if (::statvfs(root.c_str(), &fs) == 0) facts.shm_free = static_cast<std::uint64_t>(fs.f_bavail) * fs.f_frsize;
  return facts;
}

std::uint64_t default_checkpoint_memory(const MemoryFacts& facts) {
  return std::min(facts.mem_total / 2, facts.shm_free);
}

std::string describe_default(const MemoryFacts& facts, const std::string& root) {
  return fmt::format("half of {} of memory, at most the {} free in {}", format_bytes(facts.mem_total),
                     format_bytes(facts.shm_free), root);
}

}  // namespace ctrun::agent::checkpoint
