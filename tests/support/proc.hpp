#pragma once
// What /proc says of a process: whether it still runs, and its memory.

#include <sys/types.h>

#include <cstdint>
#include <fstream>
#include <iterator>
#include <string>

namespace ctrun::test {

// True if pid exists and is not a zombie.
inline bool alive(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  if (!stat) return false;
  const std::string content((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
  const auto close = content.rfind(')');
  return close != std::string::npos && close + 2 < content.size() && content[close + 2] != 'Z';
}

// VmHWM (peak) or VmRSS (now) of a process, in KiB; 0 if unreadable.
inline std::uint64_t proc_status_kib(pid_t pid, const char* field) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  const std::string want = std::string(field) + ":";
  while (std::getline(f, line))
    if (line.rfind(want, 0) == 0) return std::stoull(line.substr(want.size()));
  return 0;
}

}  // namespace ctrun::test
