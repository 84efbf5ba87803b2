#include "agent/hang/stacks.hpp"

#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <vector>

namespace ctrun::agent::hang {

int stack_signal() { return SIGRTMIN + 2; }

std::optional<double> cpu_seconds(int pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string text;
  if (!std::getline(in, text)) return std::nullopt;
  // The command name (field 2) may hold spaces and parentheses: fields resume after its last ')'.
  const auto close = text.rfind(')');
  if (close == std::string::npos) return std::nullopt;
  std::istringstream rest(text.substr(close + 2));
  std::string field;
  unsigned long long utime = 0, stime = 0;
  // Fields 3..13, then utime (14) and stime (15).
  for (int i = 3; i <= 13 && rest >> field; ++i) {
  }
  if (!(rest >> utime >> stime)) return std::nullopt;
  return static_cast<double>(utime + stime) / static_cast<double>(::sysconf(_SC_CLK_TCK));
}

bool catches_signal(int pid, int sig) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(in, line)) {
    if (!line.starts_with("SigCgt:")) continue;
    const unsigned long long mask = std::strtoull(line.c_str() + 7, nullptr, 16);
    return sig >= 1 && sig <= 64 && (mask >> (sig - 1)) & 1;
  }
  return false;
}

bool dump_in_progress(int pid, int thread, int sig) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/task/" + std::to_string(thread) + "/status");
  std::string line;
  bool found = false;
  while (std::getline(in, line)) {
    for (const char* field : {"SigPnd:", "ShdPnd:", "SigBlk:"}) {
      if (!line.starts_with(field)) continue;
      const unsigned long long mask = std::strtoull(line.c_str() + std::strlen(field), nullptr, 16);
      found |= sig >= 1 && sig <= 64 && ((mask >> (sig - 1)) & 1);
    }
  }
  return found;  // false too when the thread is gone: nothing more will be written
}

std::optional<StackFileHead> read_head(const std::string& stack_file, int pid) {
  std::ifstream in(stack_file);
  std::string line;
  // The file may hold the heads and dumps of earlier workers of the same rank (restarts): the newest for `pid`.
  std::optional<StackFileHead> out;
  while (std::getline(in, line)) {
    StackFileHead h;
    unsigned long long ident = 0;
    int sig = 0;
    if (std::sscanf(line.c_str(), "# ctrun: stack dumps of pid %d: signal %d, thread %d, ident 0x%llx", &h.pid, &sig,
                    &h.thread, &ident) == 4 &&
        h.pid == pid) {
      h.ident = ident;
      out = h;
    }
  }
  return out;
}

DumpRequest request_dump(int pid, const std::string& stack_file) {
  if (::kill(pid, 0) != 0 && errno == ESRCH) return DumpRequest::kGone;
  const int sig = stack_signal();
  if (!catches_signal(pid, sig)) return DumpRequest::kNoHandler;
  auto head = read_head(stack_file, pid);
  if (!head) return DumpRequest::kNoHandler;
  if (::syscall(SYS_tgkill, pid, head->thread, sig) != 0) {
    return errno == ESRCH ? DumpRequest::kGone : DumpRequest::kNoHandler;
  }
  return DumpRequest::kSent;
}

std::uint64_t file_size(const std::string& path) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  return in ? static_cast<std::uint64_t>(in.tellg()) : 0;
}

std::string last_dump(const std::string& stack_file, std::uint64_t offset, std::uint64_t ident, std::size_t max_bytes) {
  std::ifstream in(stack_file, std::ios::binary);
  if (!in) return {};
  in.seekg(0, std::ios::end);
  const auto end = static_cast<std::uint64_t>(in.tellg());
  if (end <= offset) return {};
  const std::uint64_t from = end - offset > max_bytes ? end - max_bytes : offset;
  in.seekg(static_cast<std::streamoff>(from));
  std::string text(static_cast<std::size_t>(end - from), '\0');
  in.read(text.data(), static_cast<std::streamsize>(text.size()));
  // Blocks are separated by blank lines; leave out the one of ctrun's own sleeping thread.
  char own[40];
  std::snprintf(own, sizeof own, "hread 0x%016llx", static_cast<unsigned long long>(ident));
  std::istringstream lines(text);
  std::string line, block, out;
  auto flush = [&] {
    if (!block.empty() && (ident == 0 || block.find(own) == std::string::npos)) out += block;
    block.clear();
  };
  while (std::getline(lines, line)) {
    if (line.empty() || line.starts_with("Thread 0x") || line.starts_with("Current thread 0x")) flush();
    if (!line.empty()) block += line + "\n";
  }
  flush();
  return out;
}

}  // namespace ctrun::agent::hang
