#include "agent/escapees.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <unistd.h>

#include <csignal>
#include <cstdlib>
#include <random>
#include <string_view>

#include <fmt/format.h>

namespace ctrun::agent {

std::string make_job_token() {
  std::random_device rd;
  std::uint64_t r = (static_cast<std::uint64_t>(rd()) << 32) ^ rd();
  return fmt::format("{}-{:016x}", ::getpid(), r);
}

namespace {

// True if /proc/<pid>/environ holds exactly "CTRUN_JOB_TOKEN=<token>" as one entry.
bool marked(const char* pid, const std::string& needle) {
  char path[64];
  std::snprintf(path, sizeof path, "/proc/%s/environ", pid);
  int fd = ::open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  std::string env;
  char buf[8192];
  for (;;) {
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n <= 0) break;
    env.append(buf, static_cast<std::size_t>(n));
    if (env.size() > (1u << 20)) break;  // an environment larger than 1 MiB is not one ctrun made
  }
  ::close(fd);
  for (std::size_t pos = 0; pos < env.size();) {
    std::size_t end = env.find('\0', pos);
    if (end == std::string::npos) end = env.size();
    if (std::string_view(env).substr(pos, end - pos) == needle) return true;
    pos = end + 1;
  }
  return false;
}

}  // namespace

int signal_marked_processes(const std::string& token, int sig) {
  if (token.empty()) return 0;
  const std::string needle = std::string(kJobTokenVariable) + "=" + token;
  const pid_t self = ::getpid();
  int count = 0;
  DIR* proc = ::opendir("/proc");
  if (proc == nullptr) return 0;
  while (dirent* e = ::readdir(proc)) {
    const char* name = e->d_name;
    if (name[0] < '1' || name[0] > '9') continue;
    pid_t pid = static_cast<pid_t>(std::strtol(name, nullptr, 10));
    if (pid == self) continue;
    if (marked(name, needle) && ::kill(pid, sig) == 0) ++count;
  }
  ::closedir(proc);
  return count;
}

}  // namespace ctrun::agent
