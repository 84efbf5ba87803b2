#pragma once
// The rendezvous calls that end a round for this node, each on the helper lane with its answer back on the loop:
// the exit barrier (every local worker succeeded; wait for the other nodes, so that an early finisher does not look
// like a scale-down: torchrun's 300 s), close (shutdown(): the run id closes for every node, on success or with no
// restarts left) and leave (a death signal: the round is left without closing the run, so the other nodes re-form at
// once, torchrun #67742; bounded, so that a store that does not answer cannot hold the agent past the signal's
// second). Connecting to the rendezvous (making the handler) is here too: the first call of a run.

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "agent/base/launch_config.hpp"
#include "agent/launch/reachable_address.hpp"
#include "rendezvous/handler.hpp"

namespace boost::asio {
class io_context;
}

namespace ctrun::agent {

class EventLog;
class HelperLane;

// What connecting gave: the handler, or an error with its exit code (2: a bad flag, 1: the rendezvous failed).
struct Connected {
  std::shared_ptr<rdzv::Handler> handler;
  PublishedAddress published;  // where this node's workers' store is published
  int code = 0;
  std::string error;
};

class RoundEnd {
 public:
  RoundEnd(boost::asio::io_context& io, HelperLane& lane, const LaunchConfig& config);
  ~RoundEnd();

  // Makes the rendezvous handler (`given`, or the one the config asks for: it connects to, or hosts, the rendezvous
  // store) and hands it the workers' store (`store_port`, none on static nodes other than rank 0) at an address the
  // other nodes can reach: a host name that resolves to loopback here would send their workers to their own loopback.
  // A changed address and an error are said (log, event log) before `done`.
  void connect(std::shared_ptr<rdzv::Handler> given, std::optional<std::uint16_t> store_port,
               const std::string& store_host, EventLog& events, std::function<void(Connected)> done);
  void exit_barrier(std::shared_ptr<rdzv::Handler> handler, std::function<void()> done);
  void close(std::shared_ptr<rdzv::Handler> handler, std::function<void()> done);
  // `done` when left, or when `budget` ran out first (then possibly once more, when the answer comes).
  void leave(std::shared_ptr<rdzv::Handler> handler, std::chrono::milliseconds budget, std::function<void()> done);
  void cancel();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ctrun::agent
