#include "agent/process/escapees.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
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

int signal_marked_processes(const std::string& token, int sig, const std::vector<pid_t>& spare) {
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
    if (pid == self || std::find(spare.begin(), spare.end(), pid) != spare.end()) continue;
    if (marked(name, needle) && ::kill(pid, sig) == 0) ++count;
  }
  ::closedir(proc);
  return count;
}

bool become_subreaper() { return ::prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0; }

bool is_subreaper() {
  int on = 0;
  return ::prctl(PR_GET_CHILD_SUBREAPER, &on, 0, 0, 0) == 0 && on != 0;
}

namespace {

// The pids of the caller's children, from /proc/<pid>/stat's ppid field ("pid (comm) state ppid ...").
std::vector<pid_t> children_of_self() {
  std::vector<pid_t> out;
  const pid_t self = ::getpid();
  DIR* proc = ::opendir("/proc");
  if (proc == nullptr) return out;
  while (dirent* e = ::readdir(proc)) {
    const char* name = e->d_name;
    if (name[0] < '1' || name[0] > '9') continue;
    const std::string path = std::string("/proc/") + name + "/stat";
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) continue;
    char buf[512];
    ssize_t n = ::read(fd, buf, sizeof buf - 1);
    ::close(fd);
    if (n <= 0) continue;
    buf[n] = '\0';
    const char* paren = std::strrchr(buf, ')');  // comm may hold spaces and parentheses: the last ')' ends it
    if (paren == nullptr) continue;
    char state = 0;
    int ppid = 0;
    if (std::sscanf(paren + 1, " %c %d", &state, &ppid) != 2 || ppid != self) continue;
    out.push_back(static_cast<pid_t>(std::strtol(name, nullptr, 10)));
  }
  ::closedir(proc);
  return out;
}

bool kept(const std::vector<pid_t>& keep, pid_t pid) { return std::find(keep.begin(), keep.end(), pid) != keep.end(); }

}  // namespace

int kill_adopted(const std::vector<pid_t>& keep) {
  int count = 0;
  for (pid_t pid : children_of_self()) {
    if (!kept(keep, pid) && ::kill(pid, SIGKILL) == 0) ++count;
  }
  return count;
}

int reap_adopted(const std::vector<pid_t>& keep) {
  int count = 0;
  for (pid_t pid : children_of_self()) {
    if (kept(keep, pid)) continue;
    int status = 0;
    if (::waitpid(pid, &status, WNOHANG) == pid) ++count;
  }
  return count;
}

}  // namespace ctrun::agent
