#include "agent/metrics/liveness.hpp"

#include <cstdio>
#include <stdexcept>

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>

#include "common/http/server.hpp"
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
  const std::string t(text::trim(*v));
  std::size_t used = 0;
  long port = -1;
  try {
    port = std::stol(t, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used == 0 || used != t.size() || port < 0 || port > 65535)
    throw std::invalid_argument("Invalid healthcheck port value: '" + *v +
                                "', expecting integer. Not starting healthcheck server.");
  return static_cast<std::uint16_t>(port);
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
