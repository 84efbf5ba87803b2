#pragma once
// What the agent does for agent/policy/node_policy.hpp: after a worker of its attempt failed, it claims the round's
// first failure (one store CAS on the helper lane; the group's end waits for the answer at most kClaimBudget), so that
// only the node a failure started on counts it; and when the policy says this node keeps failing, it steps out of
// the rendezvous for a cooldown (the others go on without it at once), asking every kClosedCheckEvery whether the job
// ended meanwhile, then joins again as a spare.

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "agent/base/launch_config.hpp"
#include "agent/policy/node_policy.hpp"
#include "rendezvous/handler.hpp"

namespace boost::asio {
class io_context;
}

namespace ctrun::agent {

class EventLog;
class HelperLane;

class NodeStepOut {
 public:
  static constexpr std::chrono::seconds kClaimBudget{2};
  static constexpr std::chrono::seconds kClosedCheckEvery{5};

  // `settings.max_failures` 0: a node never steps out (one node, the static backend, --max-node-failures 0).
  NodeStepOut(boost::asio::io_context& io, HelperLane& lane, const LaunchConfig& config, EventLog& events,
              NodeFailureSettings settings);
  ~NodeStepOut();

  // A new attempt: its claim is not made yet.
  void new_attempt();
  // A worker of `attempt` failed: claims the round's first failure once. `settled` is called on the loop when the
  // answer (or its bound) came, while `current(attempt)`.
  void claim(std::uint64_t attempt, std::shared_ptr<rdzv::Handler> handler, const rdzv::RoundInfo& round,
             std::function<bool(std::uint64_t attempt)> current, std::function<void()> settled);
  // The claim is asked and not answered yet: the group's end waits for it.
  bool claim_pending() const;
  // This attempt's workers failed (`failure_seen`) and first in their round.
  bool failed_first(bool failure_seen) const;
  // The round can go on without this node (what the claim said).
  bool others_go_on() const;
  // The attempt's workers are gone: counted by the policy.
  void attempt_ended(bool failure_seen);
  // The policy's verdict for this attempt's failure.
  bool failing(bool failure_seen) const;
  // Steps out of round `round` now, then waits out the cooldown while `stepped_out()`; `come_back` on the loop when
  // it is over (or the job ended meanwhile).
  void step_out(std::shared_ptr<rdzv::Handler> handler, std::uint64_t round, std::function<bool()> stepped_out,
                std::function<void()> come_back);
  void cancel();
  int step_outs() const;

 private:
  void cool_down(std::chrono::steady_clock::time_point until);
  void settle(const rdzv::FailureClaim& claim, const std::string& error, std::uint64_t round);

  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ctrun::agent
