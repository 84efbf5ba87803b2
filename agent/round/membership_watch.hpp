#pragma once
// Multi-node rounds end when a node waits to join or a member is lost. The rendezvous answers that only when asked
// (a store read, on the helper lane), so the watch asks every --monitor-interval while the attempt runs; a
// single-node job never asks.

#include <cstdint>
#include <functional>
#include <memory>

#include "rendezvous/handler.hpp"
#include "rendezvous/round_agreement.hpp"

namespace boost::asio {
class io_context;
}

namespace ctrun::agent {

class HelperLane;

class MembershipWatch {
 public:
  MembershipWatch(boost::asio::io_context& io, HelperLane& lane, double interval_s);
  ~MembershipWatch();

  // Asks `handler` every interval while `running(attempt)`; `changed` is called on the loop once a check says the
  // round ends (and the watch stops).
  void start(std::uint64_t attempt, std::shared_ptr<rdzv::Handler> handler,
             std::function<bool(std::uint64_t attempt)> running,
             std::function<void(const rdzv::MembershipCheck& check)> changed);
  void cancel();

 private:
  void schedule();

  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ctrun::agent
