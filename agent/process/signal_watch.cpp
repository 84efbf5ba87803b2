#include "agent/process/signal_watch.hpp"

#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>

namespace ctrun::agent {

struct SignalWatch::Impl {
  explicit Impl(boost::asio::io_context& io) : death(io), forwarded(io) {}
  boost::asio::signal_set death;
  boost::asio::signal_set forwarded;
};

namespace {

void wait_on(boost::asio::signal_set& set, std::function<void(int)> on_signal) {
  set.async_wait([&set, on_signal = std::move(on_signal)](const boost::system::error_code& ec, int sig) mutable {
    if (ec) return;
    on_signal(sig);
    wait_on(set, std::move(on_signal));
  });
}

}  // namespace

SignalWatch::SignalWatch(boost::asio::io_context& io, const std::vector<int>& death,
                         const std::vector<int>& forwarded)
    : impl_(std::make_unique<Impl>(io)) {
  for (int s : death) impl_->death.add(s);
  for (int s : forwarded) impl_->forwarded.add(s);
}

SignalWatch::~SignalWatch() = default;

void SignalWatch::start(std::function<void(int)> on_death, std::function<void(int)> on_forwarded) {
  wait_on(impl_->death, std::move(on_death));
  wait_on(impl_->forwarded, std::move(on_forwarded));
}

void SignalWatch::cancel() {
  impl_->death.cancel();
  impl_->forwarded.cancel();
}

}  // namespace ctrun::agent
