#include "agent/round/round_joiner.hpp"

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <nlohmann/json.hpp>

#include "agent/base/event_log.hpp"
#include "agent/base/helper_lane.hpp"
#include "agent/health/health_gate.hpp"
#include "agent/launch/reachable_address.hpp"
#include "agent/launch/rendezvous_factory.hpp"
#include "agent/policy/agent_policy.hpp"
#include "common/log.hpp"
#include "rendezvous/parameters.hpp"

namespace ctrun::agent {
namespace {

constexpr store::Duration kAgreementTimeout = std::chrono::seconds(60);
constexpr int kMaxBrokenRounds = 100;
constexpr std::chrono::seconds kRejoinGrace{10};

}  // namespace

struct RoundJoiner::Impl {
  Impl(boost::asio::io_context& io, const LaunchConfig& c, HelperLane& l, EventLog& e, HealthGate& h, Callbacks cb)
      : config(c),
        lane(l),
        events(e),
        health(h),
        callbacks(std::move(cb)),
        log(log::get("agent")),
        health_timer(io),
        waiting_timer(io),
        rejoin_timer(io) {}

  const LaunchConfig& config;
  HelperLane& lane;
  EventLog& events;
  HealthGate& health;
  Callbacks callbacks;
  std::shared_ptr<spdlog::logger> log;
  std::shared_ptr<rdzv::Handler> handler;
  boost::asio::steady_timer health_timer;   // the next try of a node kept out
  boost::asio::steady_timer waiting_timer;  // "waiting for the other nodes ..."
  boost::asio::steady_timer rejoin_timer;   // the bound on a join after the rendezvous store was lost

  store::Duration join_timeout() const {
    store::Duration timeout = std::chrono::seconds(600);
    try {
      if (auto v = rendezvous_parameters(config).get_as_seconds("join_timeout")) timeout = *v;
    } catch (const std::exception&) {
    }
    return timeout;
  }

  // On the helper lane, once a round formed: a node other than group rank 0's dials the workers' store once (at most
  // 2 s) and says so before starting workers that would hang in init_process_group. Empty when reached.
  std::string master_unreachable(const rdzv::RoundInfo& round, bool static_multi_node) const {
    if (is_single_node(config) || round.group_rank == 0 || round.master_port == 0 || static_multi_node) return {};
    const std::string why = unreachable_reason(round.master_addr, round.master_port, std::chrono::seconds(2));
    return why.empty() ? why : unreachable_store_message(round.master_addr, round.master_port, why);
  }
};

RoundJoiner::RoundJoiner(boost::asio::io_context& io, const LaunchConfig& config, HelperLane& lane, EventLog& events,
                         HealthGate& health, Callbacks callbacks)
    : impl_(std::make_unique<Impl>(io, config, lane, events, health, std::move(callbacks))) {}

RoundJoiner::~RoundJoiner() = default;

void RoundJoiner::join(std::shared_ptr<rdzv::Handler> handler, Join join) {
  impl_->handler = std::move(handler);
  if (join.after_store_loss) bound_rejoin(join.attempt, join.last_round_end);
  check_health(Try{std::move(join), Clock::now(), 0});
}

void RoundJoiner::cancel() {
  impl_->health_timer.cancel();
  impl_->waiting_timer.cancel();
  impl_->rejoin_timer.cancel();
  impl_->health.cancel();
}

void RoundJoiner::fail(const std::string& error, int exit_code) {
  if (exit_code == kHealthCheckExitCode)
    impl_->log->error("{}", error);  // says itself what kept the node out
  else
    impl_->log->error("rendezvous failed: {}", error);
  impl_->events.emit(Event::kRendezvousFailed, {{"error", error}});
  impl_->callbacks.failed(error, exit_code);
}

// --health-check's command first (beside the loop), when there is one.
void RoundJoiner::check_health(Try t) {
  if (!impl_->health.has_command()) return request_round(std::move(t));
  impl_->health.run_command([this, t](const HealthResult& r) {
    if (!impl_->callbacks.joining(t.join.attempt)) return;
    if (!r.passed) return kept_out(t, *impl_->config.health.command, r);
    request_round(t);
  });
}

void RoundJoiner::kept_out(Try t, const std::string& what, const HealthResult& result) {
  const auto verdict = impl_->health.kept_out(what, result, Clock::now() - t.since, impl_->join_timeout(), t.failures);
  if (!verdict.retry_in) return fail(verdict.error, kHealthCheckExitCode);
  impl_->health_timer.expires_after(*verdict.retry_in);
  impl_->health_timer.async_wait([this, t](const boost::system::error_code& ec) mutable {
    if (ec || !impl_->callbacks.joining(t.join.attempt)) return;
    ++t.failures;
    check_health(std::move(t));
  });
}

// The built-in checks, then next_rendezvous() and the restart-count agreement, on the helper thread.
void RoundJoiner::request_round(Try t) {
  report_waiting(t.join.attempt, Clock::now(), std::chrono::seconds(1));  // not while a check keeps it out
  auto checks = impl_->health.builtin_context(t.join.log_dir, t.join.checkpoint_held);
  impl_->lane.run(BlockingCall::kRendezvous, [this, t, checks, handler = impl_->handler]() -> HelperLane::Continuation {
    if (checks) {
      const auto started = Clock::now();
      if (auto failed = run_node_checks(*checks)) {
        HealthResult r{false, failed->problem, "", std::chrono::duration<double>(Clock::now() - started).count()};
        return [this, t, name = failed->name, r]() {
          if (!impl_->callbacks.joining(t.join.attempt)) return;
          impl_->waiting_timer.cancel();
          kept_out(t, "built-in check " + name, r);
        };
      }
    }
    rdzv::AgreedRound agreed;
    std::string error;
    std::string unreachable;
    try {
      agreed = rdzv::next_agreed_round(*handler, t.join.restart_count, kAgreementTimeout, kMaxBrokenRounds);
      unreachable = impl_->master_unreachable(agreed.round, t.join.static_multi_node);
    } catch (const std::exception& e) {
      error = e.what();
    }
    return [this, t, agreed = std::move(agreed), error, unreachable]() mutable {
      if (!unreachable.empty()) impl_->log->error("{}", unreachable);
      if (!impl_->callbacks.current(t.join.attempt)) return;
      impl_->rejoin_timer.cancel();
      impl_->waiting_timer.cancel();
      if (error.empty()) return impl_->callbacks.formed(std::move(agreed));
      // Name who is missing: the rendezvous knows who joined, the last round's end says who left or died.
      if (!t.join.last_round_end.empty()) error += " (the previous round ended: " + t.join.last_round_end + ")";
      if (t.join.step_outs > 0)
        error += fmt::format("; this node had stepped out of the job {} time(s) for failing", t.join.step_outs);
      fail(error, 1);
    };
  });
}

// Says what the agent waits for: once after a second without a round (a round that forms at once says nothing),
// then every 30 s. The handler does not tell who joined; the round, when it forms, is one line of the agent's.
void RoundJoiner::report_waiting(std::uint64_t attempt, Clock::time_point since, Clock::duration after) {
  if (is_single_node(impl_->config)) return;
  impl_->waiting_timer.expires_after(after);
  impl_->waiting_timer.async_wait([this, attempt, since](const boost::system::error_code& ec) {
    if (ec || !impl_->callbacks.joining(attempt)) return;
    const auto waited = std::chrono::duration_cast<std::chrono::seconds>(Clock::now() - since).count();
    impl_->log->warn("{}", waiting_for_nodes_message(impl_->config, impl_->handler->run_id(),
                                                     std::string(impl_->handler->backend()), waited));
    report_waiting(attempt, since, std::chrono::seconds(30));
  });
}

// After the rendezvous store was lost, the next round is joined on a store that may be gone or back empty; the
// handler's calls may then wait on keys nobody will write. The agent does not wait past join_timeout (+ a grace for
// the restart-count agreement): it fails with a message that says what happened.
void RoundJoiner::bound_rejoin(std::uint64_t attempt, const std::string& last_round_end) {
  const auto timeout = impl_->join_timeout();
  impl_->rejoin_timer.expires_after(timeout + kRejoinGrace);
  impl_->rejoin_timer.async_wait([this, attempt, timeout, last_round_end](const boost::system::error_code& ec) {
    if (ec || !impl_->callbacks.joining(attempt)) return;
    fail(fmt::format("no new round within join_timeout ({} s) after the rendezvous store was lost ({}). If the store "
                     "was restarted, restart the job with a new --rdzv-id; otherwise check the --rdzv-endpoint host",
                     std::chrono::duration_cast<std::chrono::seconds>(timeout).count(), last_round_end),
         1);
  });
}

}  // namespace ctrun::agent
