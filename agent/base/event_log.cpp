#include "agent/base/event_log.hpp"

#include <cerrno>
#include <chrono>
#include <cstring>
#include <stdexcept>

#include <nlohmann/json.hpp>

namespace ctrun::agent {
namespace {

using E = Event;
constexpr EventKind kCatalogue[] = {
    {E::kAgentStart, "agent_start",
     "the agent is up: `run_id`, `nproc_per_node`, `max_restarts`, `master_addr`/`master_port` (where this node's "
     "workers' store listens), `rdzv_store` (the `host:port` of the rendezvous store this agent serves, empty when "
     "another process serves it)"},
    {E::kRendezvous, "rendezvous", "a round formed: `round`, `group_rank`, `group_world_size`, `world_size`"},
    {E::kRendezvousFailed, "rendezvous_failed", "joining or agreeing on a round failed: `error`"},
    {E::kMembershipChange, "membership_change",
     "nodes wait to join or a member left, so the round ends: `nodes_waiting`, `reason`"},
    {E::kWorkerStart, "worker_start", "a worker started: `local_rank`, `rank`, `pid`, `restart_count`"},
    {E::kWorkerExit, "worker_exit",
     "a worker exited: `local_rank`, `rank`, `pid`, `exitcode` (as counted), `restart_count`, `signal` when a signal "
     "killed it, and `teardown_exitcode` when it died in native teardown after its program ended (see "
     "`teardown_crash`: `exitcode` is then 0)"},
    {E::kRestart, "restart",
     "the group restarts: `restart_count`, `remaining_restarts`, `attempts_without_progress` (failed attempts in a "
     "row that committed no newer checkpoint step)"},
    {E::kSignal, "signal",
     "the agent got a death signal: `signal`, and the agent's `state` (or `again`: a second one, which hurries the "
     "end)"},
    {E::kSignalForwarded, "signal_forwarded", "a signal passed on to the workers: `signal`, `pids`"},
    {E::kEscapeesKilled, "escapees_killed", "processes that left their worker's process group killed: `count`"},
    {E::kFileTimerExpired, "file_timer_expired",
     "a worker overstayed its torch `FileTimerClient` timer: `pid`, `local_rank`, `rank`, `scope_id`, `signal`, "
     "`overdue_s`"},
    {E::kAgentFailure, "agent_failure", "the agent itself failed (its workers are stopped): `error`"},
    {E::kFailed, "failed",
     "no restarts left: the first failure, `rank`, `exitcode`, `summary` (torchrun's ChildFailedError summary, as "
     "printed)"},
    {E::kConsoleDropped, "console_dropped", "console lines dropped because the console did not keep up: `lines`"},
    {E::kShutdown, "shutdown", "the agent ends: `exit_code`"},
    {E::kMetrics, "metrics", "with `--metrics-port`: the endpoint's `url`, `host`, `port`"},
    {E::kHangSuspected, "hang_suspected",
     "a collective waited `--hang-report-after`: `group`, `group_size`, `op`, `dtype`, `bytes`, `seq`, "
     "`not_entered`, `waiting`, `waited_s`, `waited_for`, `to_fail`"},
    {E::kHangTimeout, "hang_timeout", "a collective waited `--hang-timeout`: the verdict, fields as `hang_suspected`"},
    {E::kHangResolved, "hang_resolved",
     "a reported collective went on: fields as `hang_suspected`, `waited_s` how long it lasted"},
    {E::kHangFailed, "hang_failed", "a verdict's culprit of this node killed: `rank`, `local_rank`, `pid`"},
    {E::kP2pWait, "p2p_wait",
     "a send or recv pending `--hang-report-after`: `rank`, `group`, `op`, `peer`, `peer_group_rank`, `bytes`, "
     "`pending`, `waited_s`"},
    {E::kP2pWaitResolved, "p2p_wait_resolved", "a reported send or recv finished: fields as `p2p_wait`"},
    {E::kStraggler, "straggler",
     "the rank last into a group's collectives over a window: `group`, `rank`, `lag_s`, `median_lag_s`, `ops`, "
     "`window_s`"},
    {E::kQuiet, "quiet",
     "workers without ctrun's collectives used no CPU and wrote nothing for `--hang-report-after`: `quiet_s`"},
    {E::kHangTimeoutLearned, "hang_timeout_learned",
     "`--hang-timeout auto` chose a timeout (past the warm-up, and again when it rose by a tenth): `timeout_s`, "
     "`longest_gap_s`, `completed`"},
    {E::kWorkerUnkillable, "worker_unkillable",
     "a worker survived SIGKILL for 5 s (stuck in the kernel): ctrun stopped waiting for it: `local_rank`, `rank`, "
     "`pid`, `state` (its /proc state letter, `D`: uninterruptible sleep)"},
    {E::kNodeUnhealthy, "node_unhealthy", "this node was found unhealthy: `reason`"},
    {E::kCheckpointHeld, "checkpoint_held",
     "an attempt starts: the in-memory checkpoint steps each local rank holds, `bytes`, torn saves removed, "
     "`resume_step`"},
    {E::kCheckpointCommit, "checkpoint_commit",
     "a rank's `ck.save` of a step is complete: `rank`, `step`, `bytes`, "
     "`seconds`"},
    {E::kCheckpointLoad, "checkpoint_load",
     "a rank loaded a step, or found none: `rank`, `step` (or null), `seconds`, `agree_seconds` (of them, finding "
     "the step every rank holds)"},
    {E::kCheckpointRefused, "checkpoint_refused",
     "a save failed (over `--checkpoint-memory`, ...): `rank`, `step`, "
     "`error`"},
    {E::kCheckpointSpilled, "checkpoint_spilled",
     "the spill process of `--checkpoint-dir` ended: `step`, `dir`, `seconds`, `ok` (and `exit` when not)"},
    {E::kCheckpointReplicated, "checkpoint_replicated",
     "this node's newest committed step was copied to another node's agent: `step`, `bytes`, `seconds`, `to`"},
    {E::kCheckpointReplicationFailed, "checkpoint_replication_failed",
     "a copy to another node's agent failed (what was held stays): `step`, `to`, `error`"},
    {E::kCheckpointFetched, "checkpoint_fetched",
     "before an attempt, a local rank's resume step was brought from where it was held: `rank`, `step`, `bytes`, "
     "`from` (an endpoint, or `local replica`), `seconds`, `error`"},
    {E::kNoProgress, "no_progress",
     "`--stop-without-progress` restarts in a row made no progress, so the job stops instead of restarting: "
     "`restarts_without_progress`, `resume_step` (the newest step every local rank holds, or null), `exit_code`"},
    {E::kHealthCheckFailed, "health_check_failed",
     "`--health-check` or a built-in check failed, so this node stays out of the round: `command` (or `built-in "
     "check NAME`), `result` (`exit 1`, `timed out "
     "after 60 s`, ...), `output` (its last 4 KiB), `seconds`, `failures` (in a row), `retry_in_s` (null: it gives "
     "up)"},
    {E::kNodeSteppedOut, "node_stepped_out",
     "this node's workers failed first in their round `--max-node-failures` times within `--node-failure-window` "
     "(or again after a cooldown), so it left the job while the others go on: `failures`, `window_s`, `cooldown_s`, "
     "`step_outs`"},
    {E::kNodeReturned, "node_returned",
     "a stepped-out node's cooldown ended: it joins again (as a spare when the round is full): `step_outs`"},
    {E::kTeardownCrash, "teardown_crash",
     "a worker whose Python program ended with exit status 0 then died in native teardown (interpreter shutdown, C++ "
     "destructors), so it counts as exit 0: `local_rank`, `rank`, `pid`, `exitcode` (what it died of), `signal`, "
     "`program_status`, `exit_called` (exit() was reached), `stderr_last_line` (when ctrun saw its stderr), "
     "`restart_count`"},
    {E::kTeardownHang, "teardown_hang",
     "a worker still ran `--shutdown-timeout` after its Python program ended, so ctrun killed it (SIGKILL) and counts "
     "it as failed: `local_rank`, `rank`, `pid`, `program_status`, `ended_s`, `restart_count`"},
};

}  // namespace

std::span<const EventKind> event_catalogue() { return kCatalogue; }

std::string_view event_name(Event event) { return kCatalogue[static_cast<std::size_t>(event)].name; }

std::string event_catalogue_markdown() {
  std::string out;
  for (const auto& k : kCatalogue) out += "- `" + std::string(k.name) + "`: " + std::string(k.doc) + "\n";
  return out;
}

EventLog::EventLog(const std::optional<std::string>& path) {
  if (!path) return;
  path_ = *path;
  file_ = std::fopen(path->c_str(), "ae");
  if (file_ == nullptr) {
    throw std::runtime_error("cannot open --event-log " + *path + ": " + std::strerror(errno));
  }
}

EventLog::~EventLog() {
  if (file_ != nullptr) std::fclose(file_);
}

void EventLog::observe(Observer observer) { observers_.push_back(std::move(observer)); }

void EventLog::emit(Event event, const nlohmann::json& fields) {
  for (const auto& observer : observers_) observer(event, fields);
  if (file_ == nullptr) return;
  nlohmann::json line = fields.is_object() ? fields : nlohmann::json::object();
  line["event"] = event_name(event);
  auto now = std::chrono::system_clock::now().time_since_epoch();
  line["time"] = std::chrono::duration<double>(now).count();
  std::string text = line.dump() + "\n";
  const bool ok = std::fwrite(text.data(), 1, text.size(), file_) == text.size() && std::fflush(file_) == 0;
  if (!ok && !warned_) {
    warned_ = true;  // once: a full disk would otherwise say it for every event
    const int err = errno;
    std::fprintf(stderr, "ctrun: warning: cannot write the event log %s: %s; later events may be missing\n",
                 path_.c_str(), std::strerror(err));
  }
}

}  // namespace ctrun::agent
