#include "rendezvous/runner.hpp"

#include <algorithm>
#include <atomic>

#include <boost/asio.hpp>

#include "common/log.hpp"

namespace ctrun::rdzv {

namespace asio = boost::asio;

struct Runner::Impl {
  asio::io_context io;
  asio::executor_work_guard<asio::io_context::executor_type> work{io.get_executor()};
};

namespace {

class AsioTimer final : public Runner::Timer {
 public:
  explicit AsioTimer(asio::io_context& io) : timer(io) {}
  void cancel() override {
    cancelled = true;
    // Frees the timer now rather than at its expiry (a cancel from any thread: the timer is touched on the runner).
    if (auto keep = self.lock()) asio::post(timer.get_executor(), [keep] { keep->timer.cancel(); });
  }
  asio::steady_timer timer;
  std::weak_ptr<AsioTimer> self;
  std::atomic<bool> cancelled{false};
};

}  // namespace

Runner::Runner(int threads) : impl_(std::make_unique<Impl>()) {
  for (int i = 0; i < std::max(1, threads); ++i)
    threads_.emplace_back([impl = impl_.get()] {
      for (;;) {
        try {
          impl->io.run();
          return;
        } catch (const std::exception& e) {  // a task's bug must not stop every handler's heartbeats
          log::get("rdzv")->error("rendezvous background task failed: {}", e.what());
        }
      }
    });
}

Runner::~Runner() {
  impl_->work.reset();
  impl_->io.stop();
  for (auto& t : threads_)
    if (t.joinable()) t.join();
}

void Runner::post(std::function<void()> task) { asio::post(impl_->io, std::move(task)); }

std::shared_ptr<Runner::Timer> Runner::after(std::chrono::steady_clock::duration delay, std::function<void()> task) {
  auto t = std::make_shared<AsioTimer>(impl_->io);
  t->self = t;
  t->timer.expires_after(delay);
  t->timer.async_wait([t, task = std::move(task)](boost::system::error_code ec) {
    if (!ec && !t->cancelled) task();
  });
  return t;
}

bool Runner::on_runner_thread() const {
  const auto me = std::this_thread::get_id();
  return std::any_of(threads_.begin(), threads_.end(), [me](const std::thread& t) { return t.get_id() == me; });
}

TaskScope::TaskScope() : state_(std::make_shared<State>()) {}
TaskScope::~TaskScope() { close(); }

bool TaskScope::State::enter() {
  std::lock_guard lock(mutex);
  if (!open) return false;
  ++running;
  return true;
}

void TaskScope::State::leave() {
  std::lock_guard lock(mutex);
  if (--running == 0) idle.notify_all();
}

void TaskScope::close() {
  std::unique_lock lock(state_->mutex);
  state_->open = false;
  state_->idle.wait(lock, [this] { return state_->running == 0; });
}

}  // namespace ctrun::rdzv
