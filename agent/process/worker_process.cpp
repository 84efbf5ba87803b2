#include "agent/process/worker_process.hpp"

#include <fcntl.h>
#include <linux/close_range.h>
#include <sched.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstring>

namespace ctrun::agent {
namespace {

// After fork, in the child: every descriptor but 0, 1, 2 ends at exec (as Python's close_fds, which torchrun's
// workers get): the workers' store's listening socket, other ranks' pipes and files, whatever ctrun inherited.
// A daemon of a worker then holds none of them (the store's port is free once ctrun is gone). The exec-status pipe
// (`keep`, CLOEXEC) must stay open until exec. Async-signal-safe.
// `first`: 4 when descriptor 3 is the request's channel, which stays.
void close_inherited_descriptors(int first, int keep, int max_fd) {
  // Linux >= 5.11: mark them all close-on-exec in one call; `keep` is closed by exec too, as it should be.
  if (::syscall(SYS_close_range, static_cast<unsigned>(first), ~0u, CLOSE_RANGE_CLOEXEC) == 0) return;
  for (int fd = first; fd < max_fd; ++fd) {
    if (fd != keep) ::close(fd);
  }
}

// The bound for the fallback loop, read before fork (getrlimit is not async-signal-safe everywhere).
int descriptor_limit() {
  rlimit r{};
  if (::getrlimit(RLIMIT_NOFILE, &r) != 0 || r.rlim_cur == RLIM_INFINITY || r.rlim_cur > (1u << 20)) return 1 << 16;
  return static_cast<int>(r.rlim_cur);
}

}  // namespace

std::string resolve_program(const std::string& name, const std::vector<std::string>& env) {
  if (name.find('/') != std::string::npos) return name;
  std::string path = "/usr/local/bin:/usr/bin:/bin";
  for (const auto& e : env) {
    if (e.rfind("PATH=", 0) == 0) path = e.substr(5);
  }
  size_t start = 0;
  while (start <= path.size()) {
    size_t end = path.find(':', start);
    std::string dir = path.substr(start, end == std::string::npos ? std::string::npos : end - start);
    std::string candidate = (dir.empty() ? "." : dir) + "/" + name;
    if (::access(candidate.c_str(), X_OK) == 0) return candidate;
    if (end == std::string::npos) break;
    start = end + 1;
  }
  throw SpawnError("cannot find '" + name + "' on PATH (" + path + ")");
}

StartedWorker start_worker(const SpawnRequest& request) {
  // Everything the child needs is built before fork: after fork only async-signal-safe calls are allowed.
  std::string program = resolve_program(request.argv.at(0), request.env);
  std::vector<char*> argv;
  for (const auto& a : request.argv) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  std::vector<char*> envp;
  for (const auto& e : request.env) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);
  cpu_set_t cpus;
  CPU_ZERO(&cpus);
  for (int c : request.cpus) CPU_SET(c, &cpus);

  const int max_fd = descriptor_limit();
  int status_pipe[2];
  if (::pipe2(status_pipe, O_CLOEXEC) != 0) throw SpawnError(std::string("pipe2: ") + std::strerror(errno));
  pid_t parent = ::getpid();
  pid_t pid = ::fork();
  if (pid < 0) {
    int err = errno;
    ::close(status_pipe[0]);
    ::close(status_pipe[1]);
    throw SpawnError(std::string("fork: ") + std::strerror(err));
  }
  if (pid == 0) {
    ::close(status_pipe[0]);
    auto fail = [&](int err) {
      (void)!::write(status_pipe[1], &err, sizeof err);
      ::_exit(127);
    };
    if (request.own_session ? ::setsid() < 0 : ::setpgid(0, 0) != 0) fail(errno);
    if (::prctl(PR_SET_PDEATHSIG, SIGKILL) != 0) fail(errno);
    if (::getppid() != parent) ::_exit(1);  // ctrun died before prctl took effect
    if (request.stdout_fd >= 0 && ::dup2(request.stdout_fd, STDOUT_FILENO) < 0) fail(errno);
    if (request.stderr_fd >= 0 && ::dup2(request.stderr_fd, STDERR_FILENO) < 0) fail(errno);
    int first_closed = 3;
    if (request.channel_fd >= 0) {
      if (status_pipe[1] == 3) status_pipe[1] = ::fcntl(3, F_DUPFD_CLOEXEC, 4);  // out of the channel's way
      if (status_pipe[1] < 0) ::_exit(127);
      if ((request.channel_fd == 3 ? ::fcntl(3, F_SETFD, 0) : ::dup2(request.channel_fd, 3)) < 0) fail(errno);
      first_closed = 4;
    }
    close_inherited_descriptors(first_closed, status_pipe[1], max_fd);  // after the dup2s: their sources too
    if (!request.cpus.empty()) ::sched_setaffinity(0, sizeof cpus, &cpus);
    // ctrun ignores SIGPIPE (it writes to pipes of dying workers); workers get the default back, and an
    // empty signal mask whatever thread forked them.
    ::signal(SIGPIPE, SIG_DFL);
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    ::execve(program.c_str(), argv.data(), envp.data());
    fail(errno);
  }
  ::close(status_pipe[1]);
  return StartedWorker{pid, status_pipe[0], program};
}

void confirm_exec(StartedWorker& worker) {
  int child_errno = 0;
  ssize_t n;
  do {
    n = ::read(worker.status_fd, &child_errno, sizeof child_errno);
  } while (n < 0 && errno == EINTR);
  ::close(worker.status_fd);
  worker.status_fd = -1;
  if (n == sizeof child_errno) {
    ::waitpid(worker.pid, nullptr, 0);  // it exits at once; reap it here so no one mistakes it for a worker exit
    throw SpawnError("cannot execute '" + worker.program + "': " + std::strerror(child_errno));
  }
}

bool own_session_for_workers() { return ::isatty(STDIN_FILENO) == 1; }

pid_t spawn_worker(const SpawnRequest& request) {
  StartedWorker w = start_worker(request);
  confirm_exec(w);
  return w.pid;
}

void signal_group(pid_t leader, int signum) {
  if (::killpg(leader, signum) != 0 && errno == ESRCH) {
    ::kill(leader, signum);  // not a group leader (cannot happen for our workers), or already gone
  }
}

}  // namespace ctrun::agent
