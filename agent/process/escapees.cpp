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
#include <optional>
#include <random>
#include <string_view>

#include <fmt/format.h>

#include "common/text.hpp"

namespace ctrun::agent {

std::string make_job_token() {
  std::random_device rd;
  std::uint64_t r = (static_cast<std::uint64_t>(rd()) << 32) ^ rd();
  return fmt::format("{}-{:016x}", ::getpid(), r);
}

namespace {

// True if /proc/<pid>/environ holds exactly "CTRUN_JOB_TOKEN=<token>" as one entry.
bool marked(pid_t pid, const std::string& needle) {
  char path[64];
  std::snprintf(path, sizeof path, "/proc/%d/environ", static_cast<int>(pid));
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

// The children of `pid` from its threads' /proc/<pid>/task/<tid>/children (an orphan adopted by a subreaper becomes
// the child of one of its threads): a few small reads, where a scan of every /proc/<n>/stat costs milliseconds on a
// busy machine at every reap. nullopt where the kernel has no such files (CONFIG_PROC_CHILDREN off).
std::optional<std::vector<pid_t>> children_of(pid_t pid) {
  const std::string tasks = fmt::format("/proc/{}/task", pid);
  DIR* dir = ::opendir(tasks.c_str());
  if (dir == nullptr) return std::nullopt;
  std::vector<pid_t> out;
  bool any = false;
  while (dirent* e = ::readdir(dir)) {
    if (e->d_name[0] < '1' || e->d_name[0] > '9') continue;
    const int fd = ::open((tasks + "/" + e->d_name + "/children").c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) continue;  // a thread that just ended, or no such files
    any = true;
    std::string text;
    char buf[4096];
    for (ssize_t n; (n = ::read(fd, buf, sizeof buf)) > 0;) text.append(buf, static_cast<std::size_t>(n));
    ::close(fd);
    for (const auto& word : text::split_words(text))
      out.push_back(static_cast<pid_t>(std::strtol(word.c_str(), nullptr, 10)));
  }
  ::closedir(dir);
  if (!any) return std::nullopt;
  return out;
}

// Every pid in /proc: `visit(name)` for each.
template <typename Visit>
void for_each_process(Visit visit) {
  DIR* proc = ::opendir("/proc");
  if (proc == nullptr) return;
  while (dirent* e = ::readdir(proc)) {
    if (e->d_name[0] >= '1' && e->d_name[0] <= '9') visit(e->d_name);
  }
  ::closedir(proc);
}

// The pids of the caller's children: children_of(self), else from every /proc/<pid>/stat's ppid field
// ("pid (comm) state ppid ...").
std::vector<pid_t> children_of_self() {
  const pid_t self = ::getpid();
  if (auto children = children_of(self)) return *children;
  std::vector<pid_t> out;
  for_each_process([&](const char* name) {
    const std::string path = std::string("/proc/") + name + "/stat";
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return;
    char buf[512];
    ssize_t n = ::read(fd, buf, sizeof buf - 1);
    ::close(fd);
    if (n <= 0) return;
    buf[n] = '\0';
    const char* paren = std::strrchr(buf, ')');  // comm may hold spaces and parentheses: the last ')' ends it
    if (paren == nullptr) return;
    char state = 0;
    int ppid = 0;
    if (std::sscanf(paren + 1, " %c %d", &state, &ppid) != 2 || ppid != self) return;
    out.push_back(static_cast<pid_t>(std::strtol(name, nullptr, 10)));
  });
  return out;
}

// Where a marked process can be: while the caller is a subreaper (the agent), every process that descends from it
// stays below it (an orphan is adopted by the caller, or by a subreaper below it), so its descendants are all;
// otherwise (the guardian, after ctrun died) every process.
std::vector<pid_t> marked_candidates() {
  if (is_subreaper()) {
    if (auto out = children_of(::getpid())) {
      for (std::size_t i = 0; i < out->size(); ++i) {
        if (auto more = children_of((*out)[i])) out->insert(out->end(), more->begin(), more->end());
      }
      return *out;
    }
  }
  std::vector<pid_t> out;
  for_each_process([&](const char* name) { out.push_back(static_cast<pid_t>(std::strtol(name, nullptr, 10))); });
  return out;
}

}  // namespace

int signal_marked_processes(const std::string& token, int sig, const std::vector<pid_t>& spare) {
  if (token.empty()) return 0;
  const std::string needle = std::string(kJobTokenVariable) + "=" + token;
  const pid_t self = ::getpid();
  int count = 0;
  for (pid_t pid : marked_candidates()) {
    if (pid == self || std::find(spare.begin(), spare.end(), pid) != spare.end()) continue;
    if (marked(pid, needle) && ::kill(pid, sig) == 0) ++count;
  }
  return count;
}

bool become_subreaper() { return ::prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0; }

bool is_subreaper() {
  int on = 0;
  return ::prctl(PR_GET_CHILD_SUBREAPER, &on, 0, 0, 0) == 0 && on != 0;
}

namespace {

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
