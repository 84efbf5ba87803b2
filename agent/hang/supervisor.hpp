#pragma once
// The agent's side of hang and straggler detection (agent/hang/, docs/hang.md), apart from its loop: one HangWatch
// per agent fed by the WorkerGroup's hooks (each worker's progress-region row, stack file and sitecustomize), a
// tick on the loop twice a second while an attempt runs (shared memory and /proc only, never a blocking call), the
// paced exchange of node summaries through the round's store on the helper lane, the live view, and the verdicts:
// a culprit of this node gets a hang error file and SIGKILL, and the restart policy does the rest.

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "agent/base/launch_config.hpp"
#include "rendezvous/handler.hpp"

namespace boost::asio {
class io_context;
}

namespace ctrun::agent {

class EventLog;
class HelperLane;
class LogLayout;
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

  // The live view: GET / and /status.json on 127.0.0.1 (port in <run dir>/status_port). Never fatal.
  void start_status_server(const LogLayout& layout);
  // An attempt's workers are about to start (its region is created) / were started (ticks begin).
  void begin_attempt(std::uint64_t attempt_seq, int restart_count);
  void attempt_started(const rdzv::RoundInfo& round);
  // Every worker of the attempt exited: its region goes.
  void end_attempt();
  void stop();
  // Called on the loop after every tick and when an attempt ends (the watch's local ranks are then empty): the
  // agent's metrics read the watch there.
  void on_tick(std::function<void(const hang::HangWatch& watch)> listener);
  // What another part of the agent adds to the live view at each tick (on the loop, never blocking): lines after
  // the ranks' table and keys of /status.json.
  void on_status(std::function<void(std::string& text, nlohmann::json& json)> add);
  // Several nodes: a small bounded record of this node that another part of the agent publishes with each exchange
  // (`record`, called on the loop; "" publishes nothing), and on the agent of group rank 0 every other node's latest
  // record of this attempt, handed to `received` on the loop (group rank -> record; a node that has not published
  // in this attempt is absent), read only while this node publishes one. The store calls run on the helper lane
  // with the exchange's own.
  void share_node_record(std::function<std::string()> record,
                         std::function<void(std::map<int, std::string> records)> received);
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
