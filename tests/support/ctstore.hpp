#pragma once
// The built ctstore daemon in tests, two ways: CtstoreChild (its stdout and stderr apart, on pipes: the client verbs,
// the port line, exit codes), and start_ctstore() (a server on its port, its output merged and read by a thread, so
// a server that logs a lot never blocks).
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <memory>
#include <optional>
#include <regex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "tests/support/child_process.hpp"

extern char** environ;

namespace ctrun::test {

using namespace std::chrono_literals;

inline const std::string kCtstore = std::string(CTRUN_BIN_DIR) + "/ctstore";

// build/bin/ctstore with its stdout and stderr on pipes; killed (SIGKILL) if a test leaves it running.
class CtstoreChild {
 public:
  // stderr_file: write the child's stderr there instead of a pipe (a server that logs a lot must not
  // block on a pipe nobody reads).
  // wrapper: a program that runs ctstore (e.g. {"/usr/bin/prlimit", "--as=..."}); ctstore's path follows it.
  explicit CtstoreChild(std::vector<std::string> args, const std::string& stderr_file = "",
                        std::vector<std::string> wrapper = {}) {
    int out[2], err[2];
    if (pipe2(out, O_CLOEXEC) != 0 || pipe2(err, O_CLOEXEC) != 0) throw std::runtime_error("pipe");
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, out[1], 1);
    if (stderr_file.empty())
      posix_spawn_file_actions_adddup2(&fa, err[1], 2);
    else
      posix_spawn_file_actions_addopen(&fa, 2, stderr_file.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    std::vector<char*> argv;
    args.insert(args.begin(), kCtstore);
    args.insert(args.begin(), wrapper.begin(), wrapper.end());
    const std::string program = args[0];
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    if (posix_spawn(&pid_, program.c_str(), &fa, nullptr, argv.data(), environ) != 0) pid_ = -1;
    posix_spawn_file_actions_destroy(&fa);
    ::close(out[1]);
    ::close(err[1]);
    out_ = out[0];
    err_ = err[0];
  }
  ~CtstoreChild() {
    if (pid_ > 0 && !exited_) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
    ::close(out_);
    ::close(err_);
  }
  pid_t pid() const { return pid_; }

  // Next stdout line (without '\n'), or nullopt after the deadline / EOF.
  std::optional<std::string> line(std::chrono::milliseconds timeout = 10s) {
    return read_line(out_, out_buf_, timeout);
  }

  // Waits for exit; the exit code, or nullopt on timeout (or -signal if killed by a signal).
  std::optional<int> wait(std::chrono::milliseconds timeout = 10s) {
    auto end = std::chrono::steady_clock::now() + timeout;
    while (std::chrono::steady_clock::now() < end) {
      int st = 0;
      if (::waitpid(pid_, &st, WNOHANG) == pid_) {
        exited_ = true;
        return WIFEXITED(st) ? WEXITSTATUS(st) : -WTERMSIG(st);
      }
      std::this_thread::sleep_for(10ms);
    }
    return std::nullopt;
  }

  std::string all_stderr() {
    std::string s;
    char buf[4096];
    pollfd p{err_, POLLIN, 0};
    while (::poll(&p, 1, 200) > 0) {
      ssize_t n = ::read(err_, buf, sizeof buf);
      if (n <= 0) break;
      s.append(buf, static_cast<std::size_t>(n));
    }
    return s;
  }

 private:
  static std::optional<std::string> read_line(int fd, std::string& buf, std::chrono::milliseconds timeout) {
    auto end = std::chrono::steady_clock::now() + timeout;
    for (;;) {
      if (auto nl = buf.find('\n'); nl != std::string::npos) {
        std::string l = buf.substr(0, nl);
        buf.erase(0, nl + 1);
        return l;
      }
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(end - std::chrono::steady_clock::now());
      if (left.count() <= 0) return std::nullopt;
      pollfd p{fd, POLLIN, 0};
      if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) return std::nullopt;
      char tmp[4096];
      ssize_t n = ::read(fd, tmp, sizeof tmp);
      if (n <= 0) return std::nullopt;
      buf.append(tmp, static_cast<std::size_t>(n));
    }
  }

  pid_t pid_ = -1;
  int out_ = -1, err_ = -1;
  bool exited_ = false;
  std::string out_buf_;
};

// ctstore's first stdout line, "ctstore listening on HOST:PORT": its port (the one --port 0 picked).
inline const std::regex& listening_line() {
  static const std::regex re(R"(^ctstore listening on .+:(\d+)$)");
  return re;
}

// The port ctstore's first stdout line reports; 0 when that line is something else or does not come.
inline std::uint16_t listening_port(CtstoreChild& c) {
  auto l = c.line();
  std::smatch m;
  if (!l || !std::regex_match(*l, m, listening_line())) return 0;
  return static_cast<std::uint16_t>(std::stoi(m[1]));
}

// A server child process and the port it reported.
struct ServedProcess {
  std::unique_ptr<ChildProcess> process;
  std::uint16_t port = 0;
};

// ctstore serving on 127.0.0.1:port (0: an ephemeral one), once it said it listens; throws with its output when it
// does not within 20 s. Killed with its process when the ServedProcess goes.
inline ServedProcess start_ctstore(std::uint16_t port = 0, std::vector<std::string> extra_args = {}) {
  ServedProcess s;
  std::vector<std::string> argv{kCtstore, "--host", "127.0.0.1", "--port", std::to_string(port)};
  argv.insert(argv.end(), extra_args.begin(), extra_args.end());
  s.process = std::make_unique<ChildProcess>(argv);
  auto listening = s.process->wait_for_line(listening_line(), std::chrono::seconds(20));
  if (!listening) throw std::runtime_error("ctstore did not report a listening port: " + s.process->output());
  s.port = static_cast<std::uint16_t>(std::stoi(*listening));
  return s;
}

}  // namespace ctrun::test
