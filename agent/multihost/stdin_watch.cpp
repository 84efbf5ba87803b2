#include "agent/multihost/stdin_watch.hpp"

#include <fcntl.h>
#include <poll.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <optional>
#include <string>

#include "agent/config/job_secret.hpp"

namespace ctrun::agent::multihost {
namespace {

using Clock = std::chrono::steady_clock;

int exit_code_of(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return 1;
}

}  // namespace

std::vector<std::string> without_stdin_watch_flag(std::vector<std::string> args) {
  auto it = std::find_if(args.begin(), args.end(), [](const std::string& a) {
    return a == "--exit-on-stdin-close" || a == "--exit_on_stdin_close";
  });
  if (it != args.end()) args.erase(it);
  return args;
}

int run_agent_watching_stdin(const std::vector<std::string>& args, double grace_seconds, bool secret_on_stdin) {
  // The secret line first (before the loop below reads stdin for its end), into a pipe that becomes the agent's stdin.
  int secret_pipe[2] = {-1, -1};
  if (secret_on_stdin) {
    std::string line;
    try {
      line = read_secret_line(0, 30.0);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "ctrun: %s\n", e.what());
      return 2;
    }
    if (::pipe2(secret_pipe, O_CLOEXEC) != 0) {
      std::fprintf(stderr, "ctrun: pipe: %s\n", std::strerror(errno));
      return 1;
    }
    line += "\n";
    const bool written = ::write(secret_pipe[1], line.data(), line.size()) == static_cast<ssize_t>(line.size());
    ::close(secret_pipe[1]);
    if (!written) {
      std::fprintf(stderr, "ctrun: cannot pass the job secret to the agent: %s\n", std::strerror(errno));
      return 1;
    }
  }
  sigset_t mask;
  sigemptyset(&mask);
  for (int s : {SIGCHLD, SIGTERM, SIGINT, SIGHUP}) sigaddset(&mask, s);
  sigset_t old;
  ::sigprocmask(SIG_BLOCK, &mask, &old);
  int sfd = ::signalfd(-1, &mask, SFD_CLOEXEC);
  if (sfd < 0) {
    std::fprintf(stderr, "ctrun: signalfd: %s\n", std::strerror(errno));
    return 1;
  }
  std::vector<std::string> argv_text = {"ctrun"};
  argv_text.insert(argv_text.end(), args.begin(), args.end());
  pid_t child = ::fork();
  if (child < 0) {
    std::fprintf(stderr, "ctrun: fork: %s\n", std::strerror(errno));
    return 1;
  }
  if (child == 0) {
    ::sigprocmask(SIG_SETMASK, &old, nullptr);
    int null = secret_pipe[0] >= 0 ? secret_pipe[0] : ::open("/dev/null", O_RDONLY);
    if (null >= 0) ::dup2(null, 0);
    std::vector<char*> argv;
    for (auto& a : argv_text) argv.push_back(a.data());
    argv.push_back(nullptr);
    ::execv("/proc/self/exe", argv.data());
    std::fprintf(stderr, "ctrun: cannot re-execute itself: %s\n", std::strerror(errno));
    ::_exit(127);
  }

  if (secret_pipe[0] >= 0) ::close(secret_pipe[0]);
  // stderr is the ssh channel: once the launcher is gone, writing to it must not kill this process.
  std::signal(SIGPIPE, SIG_IGN);
  bool watching = true;
  std::optional<Clock::time_point> kill_at;
  while (true) {
    pollfd fds[2] = {{sfd, POLLIN, 0}, {0, POLLIN, 0}};
    int timeout_ms = -1;
    if (kill_at) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(*kill_at - Clock::now()).count();
      timeout_ms = static_cast<int>(std::max<long long>(0, left));
    }
    int n = ::poll(fds, watching ? 2 : 1, timeout_ms);
    if (n < 0 && errno != EINTR) break;
    if (kill_at && Clock::now() >= *kill_at) {
      ::kill(child, SIGKILL);
      kill_at.reset();
    }
    if (watching && (fds[1].revents & (POLLIN | POLLHUP | POLLERR | POLLNVAL))) {
      char buf[4096];
      ssize_t r = ::read(0, buf, sizeof buf);
      if (r <= 0 && !(r < 0 && errno == EINTR)) {
        // The launcher, or the connection to it, is gone: stop the agent and its workers.
        watching = false;
        ::kill(child, SIGTERM);
        std::fprintf(stderr, "ctrun: the launcher went away (stdin closed); stopping the agent\n");
        kill_at = Clock::now() + std::chrono::milliseconds(static_cast<long long>(grace_seconds * 1000));
      }
    }
    if (fds[0].revents & POLLIN) {
      signalfd_siginfo info{};
      if (::read(sfd, &info, sizeof info) != sizeof info) continue;
      if (info.ssi_signo == SIGCHLD) {
        int status = 0;
        if (::waitpid(child, &status, WNOHANG) == child) return exit_code_of(status);
      } else {
        ::kill(child, static_cast<int>(info.ssi_signo));
      }
    }
  }
  ::kill(child, SIGKILL);
  int status = 0;
  ::waitpid(child, &status, 0);
  return exit_code_of(status);
}

}  // namespace ctrun::agent::multihost
