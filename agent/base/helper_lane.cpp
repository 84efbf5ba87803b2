#include "agent/base/helper_lane.hpp"

#include <thread>

#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/thread_pool.hpp>

namespace ctrun::agent {

std::string_view blocking_call_name(BlockingCall call) {
  switch (call) {
    case BlockingCall::kNone:
      return "nothing";
    case BlockingCall::kConnect:
      return "connection to the rendezvous store";
    case BlockingCall::kRendezvous:
      return "rendezvous";
    case BlockingCall::kMembershipCheck:
      return "membership check";
    case BlockingCall::kExitBarrier:
      return "exit barrier";
    case BlockingCall::kShutdown:
      return "rendezvous shutdown";
    case BlockingCall::kLeave:
      return "rendezvous leave";
    case BlockingCall::kProgress:
      return "progress summary exchange";
    case BlockingCall::kCheckpointExchange:
      return "checkpoint exchange between the nodes";
    case BlockingCall::kFailureClaim:
      return "claim of the round's first failure";
    case BlockingCall::kStepOut:
      return "step out of the round";
    case BlockingCall::kClosedCheck:
      return "check whether the job ended";
  }
  return "?";
}

HelperLane::HelperLane(boost::asio::io_context& loop)
    : loop_(loop), pool_(std::make_unique<boost::asio::thread_pool>(1)) {}

HelperLane::~HelperLane() { join(); }

void HelperLane::run(BlockingCall what, Work work) {
  last_ = what;
  ++busy_;
  boost::asio::post(*pool_, [this, work = std::move(work)]() {
    Continuation done = work();
    --busy_;  // before the post: once the loop runs `done`, the helper is idle
    boost::asio::post(loop_, std::move(done));
  });
}

void HelperLane::join() { pool_->join(); }

void HelperLane::abandon(std::shared_ptr<rdzv::Handler> handler, std::chrono::milliseconds budget) {
  if (!handler || !busy()) return;
  if (last_ != BlockingCall::kRendezvous && last_ != BlockingCall::kExitBarrier) return;
  auto done = std::make_shared<std::promise<void>>();
  abandoned_ = done->get_future();
  abandon_deadline_ = std::chrono::steady_clock::now() + budget;
  std::thread([handler = std::move(handler), done]() mutable {
    try {
      handler->abandon();
    } catch (...) {  // logged by the handler; the agent exits anyway
    }
    handler.reset();  // before set_value: the agent's own reference is the last one
    done->set_value();
  }).detach();  // the agent waits for it (abandon_pending), or ends the process with _exit
}

bool HelperLane::abandon_pending() {
  return abandoned_.valid() && abandoned_.wait_until(abandon_deadline_) != std::future_status::ready;
}

}  // namespace ctrun::agent
