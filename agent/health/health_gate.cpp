#include "agent/health/health_gate.hpp"

#include <algorithm>

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <nlohmann/json.hpp>

#include "agent/base/event_log.hpp"
#include "agent/health/node_check_context.hpp"
#include "common/log.hpp"

namespace ctrun::agent {

std::optional<std::chrono::steady_clock::duration> health_retry_after(std::chrono::steady_clock::duration out_for,
                                                                      std::chrono::steady_clock::duration limit,
                                                                      int failures) {
  if (out_for >= limit) return std::nullopt;
  return std::min<std::chrono::steady_clock::duration>(
      {HealthGate::kBackoffCap, std::chrono::seconds(1 << std::min(failures, 5)), limit - out_for});
}

HealthGate::HealthGate(boost::asio::io_context& io, const LaunchConfig& config, const EnvLookup& env, EventLog& events)
    : config_(config), env_(env), events_(events) {
  if (config.health.command)
    command_ = std::make_unique<HealthCheck>(io, *config.health.command, config.health.timeout);
}

HealthGate::~HealthGate() = default;

void HealthGate::run_command(HealthCheck::Done done) { command_->run(std::move(done)); }

void HealthGate::cancel() {
  if (command_) command_->cancel();
}

pid_t HealthGate::command_pid() const { return command_ ? command_->pid() : -1; }

std::optional<NodeCheckContext> HealthGate::builtin_context(
    const std::string& log_dir, const std::function<std::uint64_t()>& checkpoint_held) const {
  return node_check_context(config_, env_, log_dir, checkpoint_held);
}

HealthGate::Verdict HealthGate::kept_out(const std::string& what, const HealthResult& r, Clock::duration out_for,
                                         Clock::duration join_timeout, int failures) {
  Verdict v{health_retry_after(out_for, join_timeout, failures), ""};
  const double retry_s = v.retry_in ? std::chrono::duration<double>(*v.retry_in).count() : 0.0;
  auto log = log::get("agent");
  log->warn("health check failed ({}, {:.1f} s): this node stays out of the round; {}. `{}` printed:\n{}", r.why,
            r.seconds, v.retry_in ? fmt::format("retrying in {:.0f} s", retry_s) : std::string("giving up"), what,
            r.output.empty() ? std::string("(nothing)") : r.output);
  events_.emit(Event::kHealthCheckFailed, {{"command", what},
                                           {"result", r.why},
                                           {"output", r.output},
                                           {"seconds", r.seconds},
                                           {"failures", failures + 1},
                                           {"retry_in_s", v.retry_in ? nlohmann::json(retry_s) : nlohmann::json()}});
  if (!v.retry_in)
    v.error = fmt::format(
        "the health check ({}) kept this node out of the job for {:.0f} s (the rendezvous' join_timeout): last "
        "result {}. Fix the node (or the check) and start ctrun again; the other nodes go on without it",
        what, std::chrono::duration<double>(out_for).count(), r.why);
  return v;
}

}  // namespace ctrun::agent
