#pragma once
// Liveness for schedulers: is this agent's loop still turning? Two doors, each opened only when asked for (a job
// with neither starts no timer, no thread, no socket):
//   - `/healthz` on the `--metrics-port` endpoint;
//   - torchrun 2.x's TORCHELASTIC_HEALTH_CHECK_PORT: its agent reads the variable, and a value that is not an
//     integer starts nothing (logged); otherwise a health check server gets the port, an alive callback (the last
//     time the agent made progress, epoch seconds) and a 60 s timeout to tell alive from dead. torch's own server
//     is an interface that starts nothing; ctrun serves it over HTTP on every interface: GET / and /healthz.
// Both answer from the same rule: 200 while the loop beat within the timeout (60 s, torch's), else 503 with the
// age. The loop beats once a second from a timer on it, so an agent whose loop is stuck (a blocking call, a
// deadlock) reads as dead while its process still exists.

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "agent/base/command_line.hpp"

namespace boost::asio {
class io_context;
}

namespace ctrun::agent {

inline constexpr const char* kHealthCheckPortVariable = "TORCHELASTIC_HEALTH_CHECK_PORT";
inline constexpr double kLivenessTimeoutS = 60;  // torch's LocalElasticAgent gives its server 60

struct HealthAnswer {
  int status = 200;
  std::string body;
};

// The rule, pure: the loop's last beat `age_s` ago.
HealthAnswer health_answer(double age_s, double timeout_s = kLivenessTimeoutS);

// TORCHELASTIC_HEALTH_CHECK_PORT's value as torch reads it (int()): nullopt when unset; throws
// std::invalid_argument (torch then starts nothing and says so) for a value that is not a port number.
std::optional<std::uint16_t> health_check_port(const EnvLookup& env);

class LoopBeat {
 public:
  explicit LoopBeat(boost::asio::io_context& io);  // beats from now on, once a second, on `io`
  ~LoopBeat();
  LoopBeat(const LoopBeat&) = delete;
  LoopBeat& operator=(const LoopBeat&) = delete;
  // Seconds since the last beat; any thread.
  double age_s() const;

 private:
  struct Impl;
  std::shared_ptr<Impl> impl_;
};

// The TORCHELASTIC_HEALTH_CHECK_PORT server: HTTP on 0.0.0.0:port, on a thread of its own.
class HealthCheckServer {
 public:
  // Throws std::runtime_error naming the address when it cannot bind.
  HealthCheckServer(std::uint16_t port, const LoopBeat& beat);
  ~HealthCheckServer();
  std::uint16_t port() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// The doors a job asked for, opened: the loop's beat when /healthz (`metrics_port`) or TORCHELASTIC_HEALTH_CHECK_PORT
// asks for it, and the latter's server. A bad port is torch's: said, and nothing started for it.
struct Liveness {
  std::unique_ptr<LoopBeat> beat;
  std::unique_ptr<HealthCheckServer> server;
  // Seconds since the loop last turned, for /healthz; empty without a beat.
  std::function<double()> loop_age() const;
};
Liveness open_liveness(boost::asio::io_context& io, const EnvLookup& env, bool metrics_port);

}  // namespace ctrun::agent
