#include "agent/round/node_step_out.hpp"

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <nlohmann/json.hpp>

#include "agent/base/event_log.hpp"
#include "agent/base/helper_lane.hpp"
#include "agent/launch/rendezvous_factory.hpp"
#include "common/log.hpp"

namespace ctrun::agent {

using SteadyClock = std::chrono::steady_clock;

struct NodeStepOut::Impl {
  Impl(boost::asio::io_context& io, HelperLane& l, const LaunchConfig& c, EventLog& e, NodeFailureSettings s)
      : lane(l), config(c), events(e), policy(s), log(log::get("agent")), claim_timer(io), cooldown_timer(io) {}

  HelperLane& lane;
  const LaunchConfig& config;
  EventLog& events;
  NodeFailures policy;
  std::shared_ptr<spdlog::logger> log;
  std::optional<rdzv::FailureClaim> claim;  // this attempt's claim of its round's first failure
  bool claim_pending = false;
  std::function<void()> settled;
  boost::asio::steady_timer claim_timer;
  boost::asio::steady_timer cooldown_timer;
  std::shared_ptr<rdzv::Handler> handler;
  std::function<bool()> stepped_out;
  std::function<void()> come_back;
};

NodeStepOut::NodeStepOut(boost::asio::io_context& io, HelperLane& lane, const LaunchConfig& config, EventLog& events,
                         NodeFailureSettings settings)
    : impl_(std::make_unique<Impl>(io, lane, config, events, settings)) {}

NodeStepOut::~NodeStepOut() = default;

void NodeStepOut::new_attempt() {
  impl_->claim.reset();
  impl_->claim_pending = false;
  impl_->claim_timer.cancel();
}

void NodeStepOut::claim(std::uint64_t attempt, std::shared_ptr<rdzv::Handler> handler, const rdzv::RoundInfo& round,
                        std::function<bool(std::uint64_t)> current, std::function<void()> settled) {
  auto& i = *impl_;
  if (i.claim || i.claim_pending) return;
  if (!i.policy.enabled() || round.group_world_size <= 1) {
    i.claim = rdzv::FailureClaim{};  // alone in its round: first, and nobody to go on without it
    return;
  }
  i.claim_pending = true;
  i.settled = std::move(settled);
  i.lane.run(BlockingCall::kFailureClaim, [this, attempt, handler, current, r = round.round]() {
    rdzv::FailureClaim claim;
    std::string error;
    try {
      claim = handler->claim_failure();
    } catch (const std::exception& e) {
      error = e.what();
    }
    return [this, attempt, claim, error, current, r]() {
      if (!current(attempt) || !impl_->claim_pending) return;
      impl_->claim_timer.cancel();
      settle(error.empty() ? claim : rdzv::FailureClaim{false, false, ""}, error, r);
    };
  });
  i.claim_timer.expires_after(kClaimBudget);
  i.claim_timer.async_wait([this, attempt, current, r = round.round](const boost::system::error_code& ec) {
    if (ec || !current(attempt) || !impl_->claim_pending) return;
    settle(rdzv::FailureClaim{false, false, ""}, "no answer from the rendezvous store within 2 s", r);
  });
}

// Unknown (an error, no answer) counts as not first: a node is stepped out only on what the store said.
void NodeStepOut::settle(const rdzv::FailureClaim& claim, const std::string& error, std::uint64_t round) {
  auto& i = *impl_;
  i.claim_pending = false;
  i.claim = claim;
  if (!error.empty())
    i.log->warn(
        "could not tell which node failed first in round {} ({}); this failure does not count against this node", round,
        error);
  else if (!claim.first)
    i.log->info("this node's workers failed after {}'s (the round's first failure): not counted against this node",
                claim.first_node);
  if (i.settled) i.settled();
}

bool NodeStepOut::claim_pending() const { return impl_->claim_pending; }

bool NodeStepOut::failed_first(bool failure_seen) const { return failure_seen && impl_->claim && impl_->claim->first; }

bool NodeStepOut::others_go_on() const { return impl_->policy.enabled() && impl_->claim && impl_->claim->others_go_on; }

void NodeStepOut::attempt_ended(bool failure_seen) {
  impl_->policy.attempt_ended(failed_first(failure_seen), SteadyClock::now());
}

bool NodeStepOut::failing(bool failure_seen) const {
  return impl_->policy.failing(failed_first(failure_seen), SteadyClock::now());
}

int NodeStepOut::step_outs() const { return impl_->policy.step_outs(); }

// Leaves the job for a cooldown (MIN, doubled each time, at most MAX): the others go on without this node at once (a
// step-out ends their round as a leave does, costing them no restart), and it joins again as a spare.
void NodeStepOut::step_out(std::shared_ptr<rdzv::Handler> handler, std::uint64_t round,
                           std::function<bool()> stepped_out, std::function<void()> come_back) {
  auto& i = *impl_;
  const auto& s = i.policy.settings();
  const StepOutPlan plan = i.policy.step_out();
  const std::string why =
      plan.again ? fmt::format(
                       "node {} stepped out again: its workers failed first in round {} within {:.0f} s of its "
                       "return (step-out {}); it stays out for {:.0f} s",
                       node_address(i.config), round, s.window_s, plan.step_outs, plan.cooldown_s)
                 : fmt::format(
                       "node {} stepped out: its workers failed first in their round {} time(s) within {:.0f} s "
                       "(--max-node-failures {}); it stays out for {:.0f} s, then joins again as a spare",
                       node_address(i.config), plan.failures, s.window_s, s.max_failures, plan.cooldown_s);
  i.log->error("[{}] {}; the other nodes go on without it", i.config.workers.role, why);
  i.events.emit(Event::kNodeSteppedOut, {{"failures", plan.failures},
                                         {"window_s", s.window_s},
                                         {"cooldown_s", plan.cooldown_s},
                                         {"step_outs", plan.step_outs}});
  i.handler = handler;
  i.stepped_out = std::move(stepped_out);
  i.come_back = std::move(come_back);
  const auto until = SteadyClock::now() +
                     std::chrono::duration_cast<SteadyClock::duration>(std::chrono::duration<double>(plan.cooldown_s));
  i.lane.run(BlockingCall::kStepOut, [this, handler, why, until]() {
    try {
      handler->step_out(why);
    } catch (const std::exception& e) {
      impl_->log->warn("could not step out of the rendezvous: {}", e.what());
    }
    return [this, until]() { cool_down(until); };
  });
}

// Waits out the cooldown in slices, asking between them whether the job ended meanwhile (then there is nothing to come
// back to: the rejoin says so at once instead of after the whole cooldown).
void NodeStepOut::cool_down(SteadyClock::time_point until) {
  auto& i = *impl_;
  if (!i.stepped_out()) return;
  const auto back = [this] {
    impl_->policy.came_back(SteadyClock::now());
    impl_->log->warn(
        "[{}] the cooldown is over: this node joins again (as a spare when the round is full); one more failure of "
        "its own within {:.0f} s steps it out again",
        impl_->config.workers.role, impl_->policy.settings().window_s);
    impl_->events.emit(Event::kNodeReturned, {{"step_outs", impl_->policy.step_outs()}});
    impl_->come_back();
  };
  const auto now = SteadyClock::now();
  if (now >= until) return back();
  i.cooldown_timer.expires_after(std::min<SteadyClock::duration>(until - now, kClosedCheckEvery));
  i.cooldown_timer.async_wait([this, until, back](const boost::system::error_code& ec) {
    if (ec || !impl_->stepped_out()) return;
    if (SteadyClock::now() >= until) return back();
    impl_->lane.run(BlockingCall::kClosedCheck, [this, until, back, handler = impl_->handler]() {
      bool closed = false;
      try {
        closed = handler->is_closed();
      } catch (const std::exception&) {
        // the store is away: the rejoin after the cooldown will say what became of it
      }
      return [this, until, closed, back]() {
        if (!impl_->stepped_out()) return;
        if (closed) return back();
        cool_down(until);
      };
    });
  });
}

void NodeStepOut::cancel() {
  impl_->claim_timer.cancel();
  impl_->cooldown_timer.cancel();
}

}  // namespace ctrun::agent
