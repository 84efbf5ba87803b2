#include "agent/process/worker_process.hpp"

#include <fcntl.h>
#include <linux/close_range.h>
#include <pthread.h>
#include <sched.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstddef>
#include <cstring>

namespace ctrun::agent {
namespace {

// After fork, in the child: every descriptor but 0, 1, 2 ends at exec (as Python's close_fds, which torchrun's
// workers get): the workers' store's listening socket, other ranks' pipes and files, whatever ctrun inherited.
// A daemon of a worker then holds none of them (the store's port is free once ctrun is gone). Async-signal-safe.
// `first`: 4 when descriptor 3 is the request's channel, which stays.
void close_inherited_descriptors(int first, int max_fd) {
  // Linux >= 5.11: mark them all close-on-exec in one call.
  if (::syscall(SYS_close_range, static_cast<unsigned>(first), ~0u, CLOSE_RANGE_CLOEXEC) == 0) return;
  for (int fd = first; fd < max_fd; ++fd) {
    ::close(fd);
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

namespace {

// What the child of start_worker needs, built before the clone: the child shares the parent's memory (CLONE_VM)
// and may only make system calls on what is here, then exec or _exit.
struct ChildPlan {
  const char* program;
  char* const* argv;
  char* const* envp;
  const SpawnRequest* request;
  const cpu_set_t* cpus;
  pid_t parent;
  int max_fd;
  int exec_errno;  // written by the child when a step before exec, or exec itself, fails
};

[[noreturn]] void child_fail(ChildPlan& plan, int err) {
  plan.exec_errno = err;
  ::_exit(127);
}

// The child, on its own stack, while the forking thread is suspended (CLONE_VFORK) until it execs or exits.
// Async-signal-safe calls only; nothing here may touch the parent's state but plan.exec_errno.
int child_main(void* arg) {
  ChildPlan& plan = *static_cast<ChildPlan*>(arg);
  const SpawnRequest& request = *plan.request;
  // Every signal arrives blocked (start_worker blocked them before the clone). The handlers ctrun installed
  // (asio's signal_set writes into ctrun's own pipe) must not run here, in ctrun's memory: back to the default
  // before anything is unblocked. SIGPIPE too: ctrun ignores it (it writes to pipes of dying workers), workers
  // get the default back. Other ignored signals stay ignored across exec, as with fork.
  for (int sig = 1; sig < NSIG; ++sig) {
    struct sigaction old {};
    if (::sigaction(sig, nullptr, &old) != 0) continue;
    if (sig == SIGPIPE || (old.sa_handler != SIG_DFL && old.sa_handler != SIG_IGN)) {
      struct sigaction dfl {};
      dfl.sa_handler = SIG_DFL;
      ::sigaction(sig, &dfl, nullptr);
    }
  }
  if (request.own_session ? ::setsid() < 0 : ::setpgid(0, 0) != 0) child_fail(plan, errno);
  if (::prctl(PR_SET_PDEATHSIG, SIGKILL) != 0) child_fail(plan, errno);
  if (::getppid() != plan.parent) ::_exit(1);  // ctrun died before prctl took effect
  if (request.stdout_fd >= 0 && ::dup2(request.stdout_fd, STDOUT_FILENO) < 0) child_fail(plan, errno);
  if (request.stderr_fd >= 0 && ::dup2(request.stderr_fd, STDERR_FILENO) < 0) child_fail(plan, errno);
  int first_closed = 3;
  if (request.channel_fd >= 0) {
    if ((request.channel_fd == 3 ? ::fcntl(3, F_SETFD, 0) : ::dup2(request.channel_fd, 3)) < 0) {
      child_fail(plan, errno);
    }
    first_closed = 4;
  }
  close_inherited_descriptors(first_closed, plan.max_fd);  // after the dup2s: their sources too
  if (!request.cpus.empty()) ::sched_setaffinity(0, sizeof *plan.cpus, plan.cpus);
  // Workers get an empty signal mask whatever thread started them.
  sigset_t none;
  sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
  ::execve(plan.program, plan.argv, plan.envp);
  child_fail(plan, errno);
}

// The child's stack: it runs only the few calls above; 64 KiB leaves room for the kernel's signal frames too.
constexpr std::size_t kChildStackBytes = 64 * 1024;

}  // namespace

StartedWorker start_worker(const SpawnRequest& request) {
  // Everything the child needs is built before the clone: the child may only make system calls.
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
  std::vector<std::byte> stack(kChildStackBytes);

  // vfork semantics (CLONE_VM | CLONE_VFORK, as posix_spawn): no copy of ctrun's page tables, and no copy-on-write
  // faults in ctrun afterwards; this thread waits until the child has exec'd (or failed), so exec's errno is known
  // when clone returns. posix_spawn itself cannot set the parent-death signal or the CPU affinity.
  sigset_t all, parent_mask;
  sigfillset(&all);
  ::pthread_sigmask(SIG_SETMASK, &all, &parent_mask);
  ChildPlan plan{program.c_str(), argv.data(), envp.data(), &request, &cpus, ::getpid(),
                 descriptor_limit(), 0};
  pid_t pid = ::clone(child_main, stack.data() + stack.size(), CLONE_VM | CLONE_VFORK | SIGCHLD, &plan);
  const int clone_errno = errno;
  ::pthread_sigmask(SIG_SETMASK, &parent_mask, nullptr);
  if (pid < 0) throw SpawnError(std::string("clone: ") + std::strerror(clone_errno));
  return StartedWorker{pid, plan.exec_errno, program};
}

void confirm_exec(StartedWorker& worker) {
  if (worker.exec_errno == 0) return;
  ::waitpid(worker.pid, nullptr, 0);  // it exited at once; reap it here so no one mistakes it for a worker exit
  throw SpawnError("cannot execute '" + worker.program + "': " + std::strerror(worker.exec_errno));
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
