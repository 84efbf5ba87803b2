#pragma once
// Health before each round, in one place: --health-check's command (health_check.hpp, beside the loop), the built-in
// checks (node_checks.hpp, on the helper lane with the rendezvous call itself) and what they read
// (node_check_context.hpp). A failure keeps the node out of the round (the others form it without it, a spare in its
// place), said in the log and the event log with what failed; it retries after 1, 2, 4, ... s (at most
// kBackoffCap), and gives up when it has been kept out for the rendezvous' join_timeout: the agent then exits with
// kHealthCheckExitCode. agent/round/round_joiner drives it.

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "agent/base/command_line.hpp"
#include "agent/base/launch_config.hpp"
#include "agent/health/health_check.hpp"
#include "agent/health/node_checks.hpp"

namespace boost::asio {
class io_context;
}

namespace ctrun::agent {

class EventLog;

// The backoff rule alone (pure): after `failures` failed tries (0: the first), kept out for `out_for` of at most
// `limit`. nullopt: give up now; else the wait before the next try (the last try falls on the limit itself).
std::optional<std::chrono::steady_clock::duration> health_retry_after(std::chrono::steady_clock::duration out_for,
                                                                      std::chrono::steady_clock::duration limit,
                                                                      int failures);

class HealthGate {
 public:
  using Clock = std::chrono::steady_clock;
  static constexpr std::chrono::seconds kBackoffCap{30};

  HealthGate(boost::asio::io_context& io, const LaunchConfig& config, const EnvLookup& env, EventLog& events);
  ~HealthGate();

  bool has_command() const { return command_ != nullptr; }
  // Runs --health-check's command; `done` is called on the loop once it ended (never from inside this call).
  void run_command(HealthCheck::Done done);
  void cancel();
  // The running command's pid, or -1: the worker group's reaper of adopted children must leave it alone.
  pid_t command_pid() const;
  // What the built-in checks read now (nullopt: they are off).
  std::optional<NodeCheckContext> builtin_context(const std::string& log_dir,
                                                  const std::function<std::uint64_t()>& checkpoint_held) const;

  struct Verdict {
    std::optional<Clock::duration> retry_in;  // nullopt: give up
    std::string error;                        // when giving up: why, for the log and the rendezvous_failed event
  };
  // `what` (the command, or "built-in check NAME") kept the node out with `result`, for `out_for` so far: said in the
  // log and the event log.
  Verdict kept_out(const std::string& what, const HealthResult& result, Clock::duration out_for,
                   Clock::duration join_timeout, int failures);

 private:
  const LaunchConfig& config_;
  EnvLookup env_;
  EventLog& events_;
  std::unique_ptr<HealthCheck> command_;  // --health-check
};

}  // namespace ctrun::agent
