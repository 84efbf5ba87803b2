#pragma once
// The agent's one helper thread: every call that may block (the rendezvous handler, which handler.hpp asks to be
// called from one thread only; the store's barrier and close) runs here, and the continuation it returns runs back
// on the agent's event loop. The loop never waits for it: a death signal is honoured while a call is in flight.

#include <atomic>
#include <chrono>
#include <functional>
#include <future>
#include <memory>
#include <string_view>

#include "rendezvous/handler.hpp"

namespace boost::asio {
class io_context;
class thread_pool;
}  // namespace boost::asio

namespace ctrun::agent {

// What the helper is (or was last) busy with: a signal in some of them leaves the round first (Handler::abandon()).
enum class BlockingCall {
  kNone,
  kConnect,
  kRendezvous,
  kMembershipCheck,
  kExitBarrier,
  kShutdown,
  kLeave,
  kProgress,
  kCheckpointExchange,
  kFailureClaim,
  kStepOut,
  kClosedCheck
};
std::string_view blocking_call_name(BlockingCall call);

class HelperLane {
 public:
  using Continuation = std::function<void()>;
  using Work = std::function<Continuation()>;

  explicit HelperLane(boost::asio::io_context& loop);
  ~HelperLane();  // joins: reached only with the helper idle, or at process exit
  HelperLane(const HelperLane&) = delete;
  HelperLane& operator=(const HelperLane&) = delete;

  // Runs work on the helper thread, then posts the continuation it returns to the loop.
  void run(BlockingCall what, Work work);
  // A task is queued or running.
  bool busy() const { return busy_.load() > 0; }
  // The call most recently handed to the helper (set on the loop thread).
  BlockingCall last() const { return last_; }
  void join();

  // A death signal while the helper is blocked in the handler (joining a round, or in the exit barrier): leaves
  // that round from a thread of its own (Handler::abandon(), on a connection of its own), so the others see "left"
  // now rather than a heartbeat timeout. Does nothing in other calls.
  void abandon(std::shared_ptr<rdzv::Handler> handler, std::chrono::milliseconds budget);
  // Waits for abandon()'s thread until its budget ends; true when it is still running.
  bool abandon_pending();

 private:
  boost::asio::io_context& loop_;
  BlockingCall last_ = BlockingCall::kNone;
  std::atomic<int> busy_{0};
  std::unique_ptr<boost::asio::thread_pool> pool_;
  std::future<void> abandoned_;  // abandon()'s thread
  std::chrono::steady_clock::time_point abandon_deadline_{};
};

}  // namespace ctrun::agent
