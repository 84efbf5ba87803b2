#include "store/client_loop.hpp"

#include <boost/asio.hpp>

#include "common/log.hpp"

namespace ctrun::store {

struct ClientLoop::Impl {
  boost::asio::io_context io{1};
  boost::asio::executor_work_guard<boost::asio::io_context::executor_type> work{io.get_executor()};
};

ClientLoop::ClientLoop() : impl_(std::make_unique<Impl>()) {
  thread_ = std::thread([impl = impl_.get()] {
    for (;;) {
      try {
        impl->io.run();
        return;
      } catch (const std::exception& e) {  // a handler's bug must not take every connection's reader with it
        log::get("store")->error("store client loop: {}", e.what());
      }
    }
  });
}

ClientLoop::~ClientLoop() {
  impl_->work.reset();
  impl_->io.stop();
  if (thread_.joinable()) thread_.join();
}

boost::asio::io_context& ClientLoop::io() { return impl_->io; }

}  // namespace ctrun::store
