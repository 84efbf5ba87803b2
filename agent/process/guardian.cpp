#include "agent/process/guardian.hpp"

#include <fcntl.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdint>
#include <set>
#include <string>

#include "agent/process/escapees.hpp"

namespace ctrun::agent {
namespace {

int g_write_fd = -1;
pid_t g_guardian_pid = -1;

// Messages on the pipe: a positive group id to watch, its negation to forget, or this: ctrun's job is over.
constexpr std::int32_t kReleased = 0;

void send(std::int32_t message) {
  if (g_write_fd < 0) return;
  const char* p = reinterpret_cast<const char*>(&message);
  std::size_t left = sizeof message;
  while (left > 0) {
    ssize_t n = ::write(g_write_fd, p, left);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;  // the guardian is gone: nothing more to do
    p += n;
    left -= static_cast<std::size_t>(n);
  }
}

[[noreturn]] void guardian_main(int read_fd, const std::string& token) {
  ::prctl(PR_SET_NAME, "ctrun-guardian");
  for (int s = 1; s < NSIG; ++s) {
    if (s != SIGKILL && s != SIGSTOP) ::signal(s, SIG_IGN);
  }
  int null_fd = ::open("/dev/null", O_RDWR);
  if (null_fd >= 0) {
    for (int fd = 0; fd <= 2; ++fd) ::dup2(null_fd, fd);  // hold no terminal or pipe of ctrun's open
    if (null_fd > 2) ::close(null_fd);
  }
  std::set<pid_t> groups;
  std::int32_t message = 0;
  std::size_t have = 0;
  bool released = false;
  for (;;) {
    ssize_t n = ::read(read_fd, reinterpret_cast<char*>(&message) + have, sizeof message - have);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;  // EOF: ctrun exited or was killed
    have += static_cast<std::size_t>(n);
    if (have < sizeof message) continue;
    have = 0;
    if (message > 0) groups.insert(message);
    if (message < 0) groups.erase(-message);
    if (message == kReleased) released = true;
  }
  for (pid_t g : groups) ::kill(-g, SIGKILL);
  // ctrun ended its job itself and swept what escaped the groups: a scan of every process on the node (milliseconds
  // of CPU on a busy one, competing with whatever starts next) would find nothing.
  if (released) ::_exit(0);
  // Then whatever left its group (setsid, a double-forked daemon): found by ctrun's mark in its environment. A
  // few passes: a process killed mid-fork may have left a child the previous pass did not see.
  for (int pass = 0; pass < 3 && signal_marked_processes(token, SIGKILL) > 0; ++pass) ::usleep(20000);
  ::_exit(0);
}

}  // namespace

bool start_guardian(const std::string& job_token) {
  int p[2];
  if (::pipe2(p, O_CLOEXEC) != 0) return false;
  pid_t pid = ::fork();
  if (pid < 0) {
    ::close(p[0]);
    ::close(p[1]);
    return false;
  }
  if (pid == 0) {
    ::close(p[1]);
    // Close every other inherited descriptor: the guardian must not keep a listening socket or a pipe alive. The
    // read end moves to 3 first, so that one close_range (Linux >= 5.9) does the rest; a loop where it is missing.
    int read_fd = p[0];
    if (read_fd != 3 && ::dup2(read_fd, 3) == 3) {
      ::close(read_fd);
      read_fd = 3;
    }
    if (::syscall(SYS_close_range, read_fd + 1, ~0U, 0) != 0) {
      for (int fd = 3; fd < 1024; ++fd) {
        if (fd != read_fd) ::close(fd);
      }
    }
    guardian_main(read_fd, job_token);
  }
  ::close(p[0]);
  g_write_fd = p[1];
  g_guardian_pid = pid;
  return true;
}

pid_t guardian_pid() { return g_guardian_pid; }

void guardian_watch(pid_t pgid) {
  if (pgid > 0) send(static_cast<std::int32_t>(pgid));
}

void guardian_forget(pid_t pgid) {
  if (pgid > 0) send(-static_cast<std::int32_t>(pgid));
}

void guardian_release() { send(kReleased); }

}  // namespace ctrun::agent
