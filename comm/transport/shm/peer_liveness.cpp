#include "comm/transport/shm/peer_liveness.hpp"

#include <poll.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

namespace ctrun::comm::transport::shm {
namespace {

struct ProcStat {
  bool readable = false;
  char state = '?';
  std::uint64_t start_time = 0;
};

// /proc/PID/stat: "pid (comm) state ppid ..."; comm may hold spaces and parentheses, so fields count from the last
// ')'. starttime is field 22, i.e. the 20th after the state.
ProcStat read_stat(const std::string& path) {
  ProcStat st;
  FILE* f = std::fopen(path.c_str(), "re");
  if (f == nullptr) return st;
  char buf[1024];
  const std::size_t n = std::fread(buf, 1, sizeof buf - 1, f);
  std::fclose(f);
  buf[n] = '\0';
  const char* close = std::strrchr(buf, ')');
  if (close == nullptr || close[1] != ' ' || close[2] == '\0') return st;
  st.state = close[2];
  const char* p = close + 3;
  for (int field = 4; field < 22 && p != nullptr; ++field) {
    p = std::strchr(p, ' ');
    if (p != nullptr) ++p;
  }
  if (p == nullptr) return st;
  st.start_time = std::strtoull(p, nullptr, 10);
  st.readable = true;
  return st;
}

ProcStat stat_of(pid_t pid) { return read_stat("/proc/" + std::to_string(pid) + "/stat"); }

bool same_process(const ProcStat& st, std::uint64_t start_time) {
  return st.readable && (start_time == 0 || st.start_time == start_time);
}

}  // namespace

std::uint64_t own_start_time() { return read_stat("/proc/self/stat").start_time; }

PeerLiveness::PeerLiveness(int size) : peers_(static_cast<std::size_t>(size)) {}

PeerLiveness::~PeerLiveness() {
  for (auto& p : peers_) {
    if (p.pidfd >= 0) ::close(p.pidfd);
  }
}

void PeerLiveness::watch(int peer, pid_t pid, std::uint64_t start_time) {
  Peer& p = peers_[static_cast<std::size_t>(peer)];
  if (p.pidfd >= 0) ::close(p.pidfd);
  p = Peer{pid, start_time, -1, false};
  if (pid <= 0 || pid == ::getpid()) return;
#ifdef SYS_pidfd_open
  const int fd = static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));  // always close-on-exec
  if (fd < 0) {
    p.gone_at_watch = errno == ESRCH;
    return;  // ENOSYS, EPERM (seccomp): the /proc fallback below
  }
  // Opened after the check the pid could be another process's: the start time says whose it is.
  if (!same_process(stat_of(pid), start_time)) {
    ::close(fd);
    p.gone_at_watch = true;
    return;
  }
  p.pidfd = fd;
#endif
}

bool PeerLiveness::exited(int peer) const {
  const Peer& p = peers_[static_cast<std::size_t>(peer)];
  if (p.gone_at_watch) return true;
  if (p.pid <= 0 || p.pid == ::getpid()) return false;
  if (p.pidfd >= 0) {
    pollfd pfd{p.pidfd, POLLIN, 0};
    return ::poll(&pfd, 1, 0) > 0;
  }
  const ProcStat st = stat_of(p.pid);
  if (!st.readable) return ::kill(p.pid, 0) != 0 && errno == ESRCH;
  return st.state == 'Z' || st.state == 'X' || !same_process(st, p.start_time);
}

}  // namespace ctrun::comm::transport::shm
