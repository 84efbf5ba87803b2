#pragma once
// Joining the next round (first round, restart or new round), with its health gate: --health-check's command first,
// then, on the helper lane, the built-in checks, next_rendezvous() and the restart-count agreement
// (rendezvous/round_agreement.hpp), and a dial of the workers' store by every node but group rank 0's. On the loop
// meanwhile: "waiting for the other nodes ..." after 1 s and every 30 s, a node kept out by a check retried with
// backoff (agent/health/health_gate.hpp), and after a lost rendezvous store a bound of join_timeout (+ a grace) on
// the rejoin. Every answer is for one attempt: one that comes back after the agent moved on is dropped.

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "agent/base/command_line.hpp"
#include "agent/base/launch_config.hpp"
#include "rendezvous/handler.hpp"
#include "rendezvous/round_agreement.hpp"

namespace boost::asio {
class io_context;
}

namespace ctrun::agent {

class EventLog;
class HealthGate;
class HelperLane;
struct HealthResult;

class RoundJoiner {
 public:
  using Clock = std::chrono::steady_clock;

  struct Callbacks {
    // The agent still joins a round for `attempt` (the attempt is current and the agent in its rendezvous state).
    std::function<bool(std::uint64_t attempt)> joining;
    // `attempt` is still the current one (the round's answer is taken in any state of it).
    std::function<bool(std::uint64_t attempt)> current;
    std::function<void(rdzv::AgreedRound round)> formed;
    // The join failed for good: the error (already logged and in the event log) and the exit code.
    std::function<void(const std::string& error, int exit_code)> failed;
  };

  // What one join needs to know besides the handler.
  struct Join {
    std::uint64_t attempt = 0;
    int restart_count = 0;
    bool after_store_loss = false;  // the previous round ended because the rendezvous store failed
    std::string last_round_end;     // why the previous round ended (named when the join fails)
    int step_outs = 0;              // how often this node stepped out (named when the join fails)
    bool static_multi_node = false;
    std::string log_dir;            // for the built-in checks
    std::function<std::uint64_t()> checkpoint_held;  // bytes held, for the built-in checks (read on the loop)
  };

  RoundJoiner(boost::asio::io_context& io, const LaunchConfig& config, HelperLane& lane, EventLog& events,
              HealthGate& health, Callbacks callbacks);
  ~RoundJoiner();
  RoundJoiner(const RoundJoiner&) = delete;
  RoundJoiner& operator=(const RoundJoiner&) = delete;

  void join(std::shared_ptr<rdzv::Handler> handler, Join join);
  // Stops the timers and a running health command: the agent leaves its rendezvous state.
  void cancel();

 private:
  // The three values a health-gated join carries from try to try.
  struct Try {
    Join join;
    Clock::time_point since;  // when this node started trying
    int failures = 0;         // checks that failed so far
  };
  void check_health(Try t);
  void kept_out(Try t, const std::string& what, const HealthResult& result);
  void request_round(Try t);
  void report_waiting(std::uint64_t attempt, Clock::time_point since, Clock::duration after);
  void bound_rejoin(std::uint64_t attempt, const std::string& last_round_end);
  void fail(const std::string& error, int exit_code);

  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ctrun::agent
