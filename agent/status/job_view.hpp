#pragma once
// The job's view: the one model that `ctrun --status` (text), /status.json and the job's page (HTML) render. Built
// from what the agent already says: the events of the event log's catalogue (agent/base/event_log.hpp; the agent
// hands every event here, with or without --event-log) give the attempts' timeline (start, end, cause, the checkpoint
// step each resumed from), this node's workers (pid, exit code), the nodes' health checks, step-outs and spares, and
// the failure summary; the hang watch's ticks give the ranks' records (every rank on group rank 0's agent) and the
// progress history (progress_history.hpp). Pure and bounded: no I/O, the caller passes the clock (epoch seconds), and
// every list it keeps has a cap (attempts, notes, nodes' events) so a job that restarts a thousand times keeps a
// view of a few hundred KiB at most.

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "agent/base/event_log.hpp"
#include "agent/hang/records.hpp"
#include "agent/status/progress_history.hpp"

namespace ctrun::agent::status {

struct ViewLimits {
  std::size_t attempts = 200;       // the first attempt and the newest ones
  std::size_t notes = 20;           // per attempt (hang reports, stragglers, ...)
  std::size_t node_events = 50;     // health checks, step-outs, rounds ended by another node
  HistoryLimits history;
};

class JobView {
 public:
  // `host`: this node's name, for its workers' rows.
  explicit JobView(std::string host, ViewLimits limits = {});

  // An event as the agent emits it, at now_s.
  void observe(Event event, const nlohmann::json& fields, double now_s);
  // A tick of the hang watch: every rank it sees now (progress is sampled from their records).
  void sample(const std::vector<hang::RankRecord>& ranks, double now_s);

  // The model at now_s. `table`: hang::table_json of the watch's ranks (the ranks' records and open hangs); the view
  // adds this node's workers without records (starting, exited), each rank's state ("hung", "exited" with its code),
  // node, rate and whether its log is here, then "job", "attempts", "progress" (the newest minute), "nodes" and
  // "failure". `logs_here(local_rank)`: whether that worker's log files exist on this node.
  nlohmann::json model(nlohmann::json table, double now_s,
                       const std::function<bool(int local_rank)>& logs_here = {}) const;
  // The whole progress history (/progress.json).
  nlohmann::json progress(double now_s) const { return history_.to_json(now_s); }

  // This node's worker of `rank` in the attempt that runs or ran last: its local rank and restart count.
  struct Worker {
    int local_rank = 0;
    int pid = 0;
    int restart_count = 0;
    bool running = false;
    std::optional<int> exitcode;
    std::string signal;
    double started_s = 0;
  };
  const std::map<int, Worker>& workers() const { return workers_; }
  // Whether the job ended (the agent said its last word: `shutdown`), or failed for good (`failed`/`no_progress`).
  bool over() const { return !failure_.is_null() || exit_code_.has_value(); }

 private:
  struct Attempt {
    int restart_count = -1;  // -1 until a worker of it starts
    std::optional<std::uint64_t> round;
    int nodes = 0;
    int world_size = 0;
    double formed_s = 0;
    double started_s = 0;  // 0: no worker started yet
    double ended_s = 0;    // 0: still running
    bool checkpoints = false;
    std::optional<std::int64_t> resume_step;
    nlohmann::json cause;  // null: none seen (yet)
    std::string outcome = "running";
    int running = 0;  // this node's workers of it still running
    std::vector<std::string> notes;
  };
  Attempt* current();
  void begin_attempt(const nlohmann::json& fields, double now_s);
  void end_attempt(const std::string& outcome, double now_s);
  void set_cause(nlohmann::json cause);
  void note(const std::string& text);
  void node_event(const std::string& kind, const std::string& text, double now_s);
  void on_worker(Event event, const nlohmann::json& fields, double now_s);
  nlohmann::json attempts_json(double now_s) const;
  nlohmann::json nodes_json(const nlohmann::json& rows, double now_s) const;
  void merge_workers(nlohmann::json& rows, double now_s, const std::function<bool(int)>& logs_here) const;

  std::string host_;
  ViewLimits limits_;
  ProgressHistory history_;
  // The job, from agent_start and the rounds.
  std::string run_id_;
  int nproc_per_node_ = 0;
  int max_restarts_ = 0;
  int remaining_restarts_ = -1;
  int group_rank_ = -1;
  double started_s_ = 0;
  std::string state_ = "starting";
  std::optional<int> exit_code_;
  std::optional<std::int64_t> newest_step_;  // the newest checkpoint step a local rank committed
  std::deque<Attempt> attempts_;
  std::size_t attempts_dropped_ = 0;
  std::map<int, Worker> workers_;  // by global rank: this node's, of the newest attempt
  // Nodes: this node's health checks and step-outs, and the rounds other nodes ended.
  struct NodeEvent {
    double t = 0;
    std::string kind;  // health_check_failed, stepped_out, returned, round_ended
    std::string text;
  };
  std::deque<NodeEvent> node_events_;
  int health_failures_ = 0;
  int step_outs_ = 0;
  double cooldown_until_s_ = 0;
  int nodes_waiting_ = 0;
  nlohmann::json failure_;  // null until the job failed for good
};

}  // namespace ctrun::agent::status
