#include "agent/round/membership_watch.hpp"

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>

#include "agent/base/helper_lane.hpp"

namespace ctrun::agent {

struct MembershipWatch::Impl {
  HelperLane& lane;
  boost::asio::steady_timer timer;
  std::chrono::steady_clock::duration interval;
  std::uint64_t attempt = 0;
  std::shared_ptr<rdzv::Handler> handler;
  std::function<bool(std::uint64_t)> running;
  std::function<void(const rdzv::MembershipCheck&)> changed;
};

MembershipWatch::MembershipWatch(boost::asio::io_context& io, HelperLane& lane, double interval_s)
    : impl_(std::make_unique<Impl>(Impl{lane, boost::asio::steady_timer(io),
                                        std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                            std::chrono::duration<double>(interval_s))})) {}

MembershipWatch::~MembershipWatch() = default;

void MembershipWatch::start(std::uint64_t attempt, std::shared_ptr<rdzv::Handler> handler,
                            std::function<bool(std::uint64_t)> running,
                            std::function<void(const rdzv::MembershipCheck&)> changed) {
  impl_->attempt = attempt;
  impl_->handler = std::move(handler);
  impl_->running = std::move(running);
  impl_->changed = std::move(changed);
  schedule();
}

void MembershipWatch::cancel() { impl_->timer.cancel(); }

void MembershipWatch::schedule() {
  impl_->timer.expires_after(impl_->interval);
  impl_->timer.async_wait([this, attempt = impl_->attempt](const boost::system::error_code& ec) {
    if (ec || !impl_->running(attempt)) return;
    impl_->lane.run(BlockingCall::kMembershipCheck, [this, attempt, handler = impl_->handler]() {
      rdzv::MembershipCheck check = rdzv::check_membership(*handler);
      return [this, attempt, check]() {
        if (!impl_->running(attempt)) return;
        if (!check.changed()) return schedule();
        impl_->changed(check);
      };
    });
  });
}

}  // namespace ctrun::agent
