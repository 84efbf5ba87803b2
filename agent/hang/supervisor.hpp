#pragma once
// The agent's side of hang and straggler detection (agent/hang/, docs/hang.md), apart from its loop: one HangWatch
// per agent fed by the WorkerGroup's hooks (each worker's progress-region row, stack file and sitecustomize), a
// tick on the loop twice a second while an attempt runs (shared memory and /proc only, never a blocking call), the
// paced exchange of node summaries through the round's store on the helper lane, stacks on request, and the
// verdicts: a culprit of this node gets a hang error file and SIGKILL, and the restart policy does the rest. The live
// view that shows the watch's ranks is agent/status/'s: it listens to the ticks.

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "agent/base/launch_config.hpp"
#include "rendezvous/handler.hpp"

namespace boost::asio {
class io_context;
}

namespace ctrun::agent {

class EventLog;
class HelperLane;
class WorkerGroup;
namespace hang {
class HangWatch;
}

class HangSupervisor {
 public:
  // `running`: whether the agent's attempt is still running (ticks stop otherwise).
  HangSupervisor(boost::asio::io_context& io, const LaunchConfig& config, WorkerGroup& group, EventLog& events,
                 HelperLane& lane, std::function<bool()> running);
  ~HangSupervisor();
  HangSupervisor(const HangSupervisor&) = delete;
  HangSupervisor& operator=(const HangSupervisor&) = delete;

  // An attempt's workers are about to start (its region is created) / were started (ticks begin).
  void begin_attempt(std::uint64_t attempt_seq, int restart_count);
  void attempt_started(const rdzv::RoundInfo& round);
  // Every worker of the attempt exited: its region goes.
  void end_attempt();
  void stop();
  // Called on the loop after every tick, in the order added, and, unless `ticks_only`, when an attempt ends (the
  // watch's local ranks are then empty): the agent's metrics and the live view read the watch there.
  void on_tick(std::function<void(const hang::HangWatch& watch)> listener, bool ticks_only = false);
  // Every local rank's Python stack, now: the watch asks every rank, and a later tick calls `answer` once with the
  // text (at most the watch's dump_wait_s after the request; at once when no attempt runs; when the attempt or the
  // agent ends first, with a line saying so).
  void request_stacks(std::function<void(std::string text)> answer);
  // The watch (its ranks and detector), for the live view's table.
  const hang::HangWatch& watch() const;
  // The stragglers found last in this job (one line per group, "rank R is last into ..."), for the failure summary.
  std::vector<std::string> stragglers() const;
  // The most collectives (ctrun's progress records) one group completed on one local rank in the attempt that
  // ended last: the agent's measure of progress for a job without in-memory checkpoints.
  std::uint64_t collectives_completed() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ctrun::agent
