#include "agent/round/round_end.hpp"

#include <spdlog/spdlog.h>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <nlohmann/json.hpp>

#include "agent/base/event_log.hpp"
#include "agent/base/helper_lane.hpp"
#include "agent/launch/rendezvous_factory.hpp"
#include "common/log.hpp"

namespace ctrun::agent {

struct RoundEnd::Impl {
  Impl(boost::asio::io_context& io, HelperLane& l, const LaunchConfig& c)
      : lane(l), config(c), log(log::get("agent")), leave_timer(io) {}
  HelperLane& lane;
  const LaunchConfig& config;
  std::shared_ptr<spdlog::logger> log;
  boost::asio::steady_timer leave_timer;
};

RoundEnd::RoundEnd(boost::asio::io_context& io, HelperLane& lane, const LaunchConfig& config)
    : impl_(std::make_unique<Impl>(io, lane, config)) {}

RoundEnd::~RoundEnd() = default;

void RoundEnd::connect(std::shared_ptr<rdzv::Handler> given, std::optional<std::uint16_t> store_port,
                       const std::string& store_host, EventLog& events, std::function<void(Connected)> done) {
  impl_->lane.run(BlockingCall::kConnect,
                  [this, given = std::move(given), store_port, store_host, &events, done = std::move(done)]() mutable {
                    Connected c{std::move(given), PublishedAddress{store_host, ""}, 0, ""};
                    try {
                      if (!c.handler) c.handler = make_rendezvous_handler(impl_->config, store_port);
                      if (store_port) {
                        c.published = publishable_store_host(impl_->config, store_host);
                        c.handler->set_worker_store_address(c.published.host, *store_port);
                      }
                    } catch (const std::invalid_argument& e) {
                      c.code = 2;
                      c.error = e.what();
                    } catch (const std::exception& e) {
                      c.code = 1;
                      c.error = std::string("rendezvous failed: ") + e.what();
                    }
                    return [this, c = std::move(c), &events, done = std::move(done)]() mutable {
                      if (!c.published.why.empty()) impl_->log->warn("{}", c.published.why);
                      if (c.code != 0) {
                        impl_->log->error("{}", c.error);
                        events.emit(Event::kRendezvousFailed, {{"error", c.error}});
                      }
                      done(std::move(c));
                    };
                  });
}

void RoundEnd::exit_barrier(std::shared_ptr<rdzv::Handler> handler, std::function<void()> done) {
  impl_->log->info("worker group succeeded");
  const double timeout_s = impl_->config.shutdown.exit_barrier_timeout;
  const auto timeout = std::chrono::duration_cast<store::Duration>(std::chrono::duration<double>(timeout_s));
  impl_->lane.run(BlockingCall::kExitBarrier, [this, handler, timeout, timeout_s, done = std::move(done)]() {
    bool passed = false;
    std::string failure;
    try {
      passed = handler->exit_barrier(timeout);
    } catch (const std::exception& e) {
      failure = e.what();
    }
    return [this, passed, failure, timeout_s, done]() {
      if (!failure.empty())
        impl_->log->warn("exit barrier failed: {} (a node that finished first may have ended the store)", failure);
      else if (!passed)
        impl_->log->warn("exit barrier timed out after {} s (--exit-barrier-timeout)", timeout_s);
      done();
    };
  });
}

void RoundEnd::close(std::shared_ptr<rdzv::Handler> handler, std::function<void()> done) {
  impl_->lane.run(BlockingCall::kShutdown, [this, handler, done = std::move(done)]() {
    try {
      handler->shutdown();
    } catch (const std::exception& e) {
      impl_->log->warn("could not close the rendezvous: {}", e.what());
    }
    return done;
  });
}

void RoundEnd::leave(std::shared_ptr<rdzv::Handler> handler, std::chrono::milliseconds budget,
                     std::function<void()> done) {
  impl_->lane.run(BlockingCall::kLeave, [this, handler, done]() {
    try {
      handler->leave();
    } catch (const std::exception& e) {
      impl_->log->warn("could not leave the rendezvous: {}", e.what());
    }
    return done;
  });
  impl_->leave_timer.expires_after(budget);
  impl_->leave_timer.async_wait([this, budget, done](const boost::system::error_code& ec) {
    if (ec) return;
    impl_->log->warn("the rendezvous did not answer within {} ms; leaving without it", budget.count());
    done();
  });
}

void RoundEnd::cancel() { impl_->leave_timer.cancel(); }

}  // namespace ctrun::agent
