#pragma once
// --health-check CMD: a command this node runs before it joins each round (`/bin/sh -c CMD`, the agent's
// environment, a process group of its own that dies with the agent). It runs beside the event loop, never on it: its
// output is read as it comes (the last kOutputKept bytes kept for the log), its exit is seen through a pidfd, and a
// timer SIGKILLs its process group at the timeout. Exit 0 passes; a non-zero exit, a death by signal, a timeout or
// a command that cannot start fails.

#include <sys/types.h>

#include <cstddef>
#include <functional>
#include <memory>
#include <string>

namespace boost::asio {
class io_context;
}

namespace ctrun::agent {

struct HealthResult {
  bool passed = false;
  std::string why;     // "exit 1", "killed by SIGSEGV", "timed out after 5 s", "could not start: ..."
  std::string output;  // stdout and stderr together, the last kOutputKept bytes
  double seconds = 0;
};

class HealthCheck {
 public:
  static constexpr std::size_t kOutputKept = 4096;
  using Done = std::function<void(const HealthResult&)>;

  HealthCheck(boost::asio::io_context& io, std::string command, double timeout_seconds);
  ~HealthCheck();  // a check still running is killed
  HealthCheck(const HealthCheck&) = delete;
  HealthCheck& operator=(const HealthCheck&) = delete;

  // Starts the command; `done` is called on the loop once it ended (never from inside run()). One at a time.
  void run(Done done);
  // Kills a running check (its process group); its `done` is not called.
  void cancel();
  // The running check's pid, or -1: a reaper of adopted children must leave it alone.
  pid_t pid() const;

 private:
  struct Impl;
  std::shared_ptr<Impl> impl_;
};

}  // namespace ctrun::agent
