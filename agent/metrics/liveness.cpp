#include "agent/metrics/liveness.hpp"

#include <cstdio>
#include <stdexcept>

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>

#include <spdlog/spdlog.h>

#include "common/http/server.hpp"
#include "common/log.hpp"
#include "common/text.hpp"

namespace ctrun::agent {
namespace {

using SteadyClock = std::chrono::steady_clock;

std::int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(SteadyClock::now().time_since_epoch()).count();
}

}  // namespace

HealthAnswer health_answer(double age_s, double timeout_s) {
  char line[160];
  if (age_s <= timeout_s) {
    std::snprintf(line, sizeof line, "ok: the agent's loop turned %.1f s ago\n", age_s);
    return {200, line};
  }
  std::snprintf(line, sizeof line, "dead: the agent's loop has not turned for %.1f s (more than %.0f s)\n", age_s,
                timeout_s);
  return {503, line};
}

std::optional<std::uint16_t> health_check_port(const EnvLookup& env) {
  const auto v = env(kHealthCheckPortVariable);
  if (!v) return std::nullopt;
  const auto port = text::parse_int<long>(text::trim(*v));
  if (!port || *port < 0 || *port > 65535)
    throw std::invalid_argument("Invalid healthcheck port value: '" + *v +
                                "', expecting integer. Not starting healthcheck server.");
  return static_cast<std::uint16_t>(*port);
}

struct LoopBeat::Impl {
  explicit Impl(boost::asio::io_context& io) : timer(io) {}
  boost::asio::steady_timer timer;
  std::atomic<std::int64_t> last_ns{now_ns()};
  void beat() {
    last_ns.store(now_ns(), std::memory_order_relaxed);
    timer.expires_after(std::chrono::seconds(1));
    timer.async_wait([this](const boost::system::error_code& ec) {
      if (!ec) beat();
    });
  }
};

LoopBeat::LoopBeat(boost::asio::io_context& io) : impl_(std::make_shared<Impl>(io)) { impl_->beat(); }
LoopBeat::~LoopBeat() { impl_->timer.cancel(); }

double LoopBeat::age_s() const {
  return static_cast<double>(now_ns() - impl_->last_ns.load(std::memory_order_relaxed)) / 1e9;
}

struct HealthCheckServer::Impl {
  std::unique_ptr<http::Server> server;
};

HealthCheckServer::HealthCheckServer(std::uint16_t port, const LoopBeat& beat) : impl_(std::make_unique<Impl>()) {
  auto answer = http::answer_now([&beat] {
    const HealthAnswer a = health_answer(beat.age_s());
    return http::Reply{"text/plain; charset=utf-8", a.body, a.status};
  });
  impl_->server = std::make_unique<http::Server>("0.0.0.0", port, http::Routes{{"/", answer}, {"/healthz", answer}});
}

HealthCheckServer::~HealthCheckServer() = default;
std::uint16_t HealthCheckServer::port() const { return impl_->server->port(); }

}  // namespace ctrun::agent

namespace ctrun::agent {

std::function<double()> Liveness::loop_age() const {
  if (!beat) return {};
  return [b = beat.get()] { return b->age_s(); };
}

Liveness open_liveness(boost::asio::io_context& io, const EnvLookup& env, bool metrics_port) {
  Liveness doors;
  auto log = log::get("agent");
  int port = -1;  // none asked for (a plain int: GCC 12 warns falsely of an optional's value here)
  try {
    if (auto p = health_check_port(env)) port = *p;
  } catch (const std::invalid_argument& e) {
    log->warn("{}", e.what());
  }
  if (port < 0 && !metrics_port) return doors;
  doors.beat = std::make_unique<LoopBeat>(io);
  if (port < 0) return doors;
  try {
    doors.server = std::make_unique<HealthCheckServer>(static_cast<std::uint16_t>(port), *doors.beat);
    log->info("health check server ({}={}): http://0.0.0.0:{}/healthz", kHealthCheckPortVariable, port,
              doors.server->port());
  } catch (const std::exception& e) {
    log->warn("no health check server ({}={}): {}", kHealthCheckPortVariable, port, e.what());
  }
  return doors;
}

}  // namespace ctrun::agent
