#pragma once
// Test helper: a child process (a server or a PyTorch worker) with its stdout+stderr captured by a reader
// thread, so tests can wait for a "ready" line with a deadline and never block on a full pipe. The child runs
// in its own process group; the destructor SIGKILLs the group and reaps it, so a failing test leaves nothing
// behind. (Boost.Process would do this too, but costs far more compile time for what tests need.)

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <map>
#include <mutex>
#include <optional>
#include <regex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace ctrun::test {

class ChildProcess {
 public:
  // argv[0] is a path (no PATH search). env entries are added to (or override) the parent's environment.
  explicit ChildProcess(std::vector<std::string> argv, std::map<std::string, std::string> env = {}) {
    int fds[2];
    if (::pipe2(fds, O_CLOEXEC) != 0) throw std::runtime_error("pipe2 failed");
    // Build everything before fork: only async-signal-safe calls are allowed in the child.
    std::vector<char*> args;
    for (auto& a : argv) args.push_back(a.data());
    args.push_back(nullptr);
    std::vector<std::string> env_strings;
    for (char** e = environ; *e != nullptr; ++e) {
      std::string s(*e);
      auto name = s.substr(0, s.find('='));
      if (env.count(name) == 0) env_strings.push_back(s);
    }
    for (auto& [k, v] : env) env_strings.push_back(k + "=" + v);
    std::vector<char*> envp;
    for (auto& s : env_strings) envp.push_back(s.data());
    envp.push_back(nullptr);

    pid_ = ::fork();
    if (pid_ < 0) throw std::runtime_error("fork failed");
    if (pid_ == 0) {
      ::setpgid(0, 0);
      ::dup2(fds[1], 1);
      ::dup2(fds[1], 2);
      ::execve(args[0], args.data(), envp.data());
      ::_exit(127);
    }
    ::setpgid(pid_, pid_);  // also from the parent, so kill(-pid) works even before the child ran
    ::close(fds[1]);
    read_fd_ = fds[0];
    reader_ = std::thread([this] { read_loop(); });
  }

  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;

  ~ChildProcess() {
    kill();
    if (reader_.joinable()) reader_.join();
    if (read_fd_ >= 0) ::close(read_fd_);
  }

  pid_t pid() const { return pid_; }

  // The first capture group of the first output line matching re, or nullopt at the deadline / on EOF.
  std::optional<std::string> wait_for_line(const std::regex& re, std::chrono::milliseconds timeout) {
    std::unique_lock lock(mutex_);
    auto deadline = std::chrono::steady_clock::now() + timeout;
    std::size_t scanned = 0;
    for (;;) {
      for (auto nl = output_.find('\n', scanned); nl != std::string::npos; nl = output_.find('\n', scanned)) {
        std::string line = output_.substr(scanned, nl - scanned);
        scanned = nl + 1;
        std::smatch m;
        if (std::regex_search(line, m, re)) return m.size() > 1 ? m[1].str() : line;
      }
      if (eof_) return std::nullopt;
      if (changed_.wait_until(lock, deadline) == std::cv_status::timeout) return std::nullopt;
    }
  }

  // Exit code (or 128 + signal) once the child exits; nullopt at the deadline (the child keeps running).
  std::optional<int> wait_exit(std::chrono::milliseconds timeout) {
    auto deadline = std::chrono::steady_clock::now() + timeout;
    while (!status_) {
      int st = 0;
      pid_t r = ::waitpid(pid_, &st, WNOHANG);
      if (r == pid_) {
        status_ = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
        break;
      }
      if (std::chrono::steady_clock::now() >= deadline) return std::nullopt;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return status_;
  }

  void signal(int sig) {
    if (!status_) ::kill(-pid_, sig);
  }

  // SIGKILL to the whole group and reap. Idempotent.
  void kill() {
    if (pid_ <= 0) return;
    if (!status_) {
      ::kill(-pid_, SIGKILL);
      wait_exit(std::chrono::seconds(10));
    } else {
      ::kill(-pid_, SIGKILL);  // grandchildren that outlived their parent
    }
  }

  std::string output() {
    std::lock_guard lock(mutex_);
    return output_;
  }

 private:
  void read_loop() {
    char buf[4096];
    for (;;) {
      ssize_t n = ::read(read_fd_, buf, sizeof(buf));
      if (n < 0 && errno == EINTR) continue;
      std::lock_guard lock(mutex_);
      if (n <= 0) {
        eof_ = true;
        changed_.notify_all();
        return;
      }
      // Bounded: a chatty child must not grow the test's memory without limit.
      if (output_.size() < (8u << 20)) output_.append(buf, static_cast<std::size_t>(n));
      changed_.notify_all();
    }
  }

  pid_t pid_ = -1;
  int read_fd_ = -1;
  std::thread reader_;
  std::mutex mutex_;
  std::condition_variable changed_;
  std::string output_;
  bool eof_ = false;
  std::optional<int> status_;
};

}  // namespace ctrun::test
