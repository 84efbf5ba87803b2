#include "agent/status/job_view.hpp"

#include <algorithm>
#include <cmath>
#include <set>

#include <fmt/format.h>

#include "rendezvous/membership.hpp"

namespace ctrun::agent::status {
namespace {

using json = nlohmann::json;

constexpr double kStartingS = 10;  // a worker with no progress record this long after its start is "running"

template <typename T>
T get_or(const json& j, const char* key, T fallback) {
  const auto it = j.find(key);
  if (it == j.end() || it->is_null()) return fallback;
  try {
    return it->get<T>();
  } catch (const json::exception&) {
    return fallback;
  }
}

std::string str(const json& j, const char* key) { return get_or<std::string>(j, key, ""); }

double rounded(double v, double scale = 10) { return std::round(v * scale) / scale; }

// "rank 2 has not entered all_reduce #3 of group 0 (ranks 0,1,3 waited 4.1 s)", from a hang event's fields.
std::string hang_words(const json& f) {
  std::vector<std::string> culprits;
  for (const auto& c : f.value("not_entered", json::array())) culprits.push_back(std::to_string(get_or(c, "rank", -1)));
  const std::string what = fmt::format("{} #{} of group {}", str(f, "op"), get_or<std::uint64_t>(f, "seq", 0),
                                       get_or(f, "group", 0));
  if (culprits.empty()) return fmt::format("every rank inside {} for {:.1f} s", what, get_or(f, "waited_s", 0.0));
  return fmt::format("rank{} {} not entered {} ({:.1f} s)", culprits.size() > 1 ? "s" : "",
                     fmt::join(culprits, ","), what, get_or(f, "waited_s", 0.0));
}

// Why a round ended under this node, from a membership change's reason ("<kind>: <reason>").
json membership_cause(const json& f) {
  const std::string reason = str(f, "reason");
  const std::string_view kind = rdzv::over_kind(reason);
  std::string what = "membership";
  if (kind == rdzv::kOverDead) what = "node_lost";
  if (kind == rdzv::kOverSteppedOut) what = "node_stepped_out";
  if (kind == rdzv::kOverLeave) what = "node_left";
  if (kind == rdzv::kOverJoin || (reason.empty() && get_or(f, "nodes_waiting", 0) > 0)) what = "node_joined";
  if (kind == rdzv::kOverRejoin) what = "node_restarted";
  const std::string text =
      reason.empty() ? fmt::format("{} node(s) waiting to join", get_or(f, "nodes_waiting", 0)) : reason;
  return {{"kind", what}, {"text", text}};
}

}  // namespace

JobView::JobView(std::string host, ViewLimits limits)
    : host_(std::move(host)), limits_(limits), history_(limits.history) {}

JobView::Attempt* JobView::current() { return attempts_.empty() ? nullptr : &attempts_.back(); }

void JobView::observe(Event event, const json& f, double now_s) {
  switch (event) {
    case Event::kAgentStart:
      run_id_ = str(f, "run_id");
      nproc_per_node_ = get_or(f, "nproc_per_node", 0);
      max_restarts_ = get_or(f, "max_restarts", 0);
      if (remaining_restarts_ < 0) remaining_restarts_ = max_restarts_;
      started_s_ = now_s;
      state_ = "rendezvous";
      return;
    case Event::kRendezvous:
      group_rank_ = get_or(f, "group_rank", -1);
      begin_attempt(f, now_s);
      state_ = "running";
      return;
    case Event::kWorkerStart:
    case Event::kWorkerExit:
      return on_worker(event, f, now_s);
    case Event::kCheckpointHeld:
      if (Attempt* a = current()) {
        a->checkpoints = true;
        if (f.contains("resume_step") && f["resume_step"].is_number())
          a->resume_step = f["resume_step"].get<std::int64_t>();
      }
      return;
    case Event::kCheckpointCommit:
      if (f.contains("step") && f["step"].is_number())
        newest_step_ = std::max(newest_step_.value_or(-1), f["step"].get<std::int64_t>());
      return;
    case Event::kHangSuspected:
      return note("hang reported: " + hang_words(f));
    case Event::kHangTimeout:
      return note("hang verdict: " + hang_words(f));
    case Event::kHangFailed:
      return set_cause({{"kind", "hang"},
                        {"rank", get_or(f, "rank", -1)},
                        {"text", fmt::format("hang: rank {} (pid {}) treated as failed", get_or(f, "rank", -1),
                                             get_or(f, "pid", 0))}});
    case Event::kStraggler:
      return note(fmt::format("straggler: rank {} is last into group {} ({:.3f} s per op behind)", get_or(f, "rank", -1),
                              get_or(f, "group", 0), get_or(f, "lag_s", 0.0)));
    case Event::kFileTimerExpired:
      return set_cause({{"kind", "file_timer"},
                        {"rank", get_or(f, "rank", -1)},
                        {"text", fmt::format("rank {} overstayed its FileTimerClient timer", get_or(f, "rank", -1))}});
    case Event::kWorkerUnkillable:
      return note(fmt::format("rank {} survived SIGKILL (state {})", get_or(f, "rank", -1), str(f, "state")));
    case Event::kMembershipChange: {
      json cause = membership_cause(f);
      nodes_waiting_ = get_or(f, "nodes_waiting", 0);
      node_event(cause["kind"].get<std::string>(), cause["text"].get<std::string>(), now_s);
      return set_cause(std::move(cause));
    }
    case Event::kNodeSteppedOut:
      step_outs_ = get_or(f, "step_outs", step_outs_ + 1);
      cooldown_until_s_ = now_s + get_or(f, "cooldown_s", 0.0);
      node_event("stepped_out",
                 fmt::format("this node stepped out ({} failures within {:.0f} s); out for {:.0f} s",
                             get_or(f, "failures", 0), get_or(f, "window_s", 0.0), get_or(f, "cooldown_s", 0.0)),
                 now_s);
      state_ = "stepped out";
      set_cause({{"kind", "stepped_out"}, {"text", "this node stepped out: its workers failed first too often"}});
      return end_attempt("stepped out", now_s);
    case Event::kNodeReturned:
      cooldown_until_s_ = 0;
      node_event("returned", "this node's cooldown ended: it joins again (a spare when the round is full)", now_s);
      state_ = "rendezvous";
      return;
    case Event::kHealthCheckFailed: {
      ++health_failures_;
      const json retry = f.value("retry_in_s", json());
      node_event("health_check_failed",
                 fmt::format("{}: {} ({} in a row){}", str(f, "command"), str(f, "result"), get_or(f, "failures", 1),
                             retry.is_number() ? fmt::format("; retry in {:.0f} s", retry.get<double>())
                                               : std::string("; gives up")),
                 now_s);
      state_ = "health check failed";
      return;
    }
    case Event::kRestart:
      remaining_restarts_ = get_or(f, "remaining_restarts", remaining_restarts_);
      end_attempt("restarted", now_s);
      state_ = "restarting";
      return;
    case Event::kSignal:
      if (!f.value("again", false))
        set_cause({{"kind", "signal"}, {"text", "ctrun got " + str(f, "signal") + ": the job stops"}});
      state_ = "stopping";
      return;
    case Event::kAgentFailure:
      return set_cause({{"kind", "agent"}, {"text", "the agent failed: " + str(f, "error")}});
    case Event::kFailed:
      failure_ = {{"rank", get_or(f, "rank", -1)},
                  {"exitcode", get_or(f, "exitcode", 0)},
                  {"summary", str(f, "summary")},
                  {"time", now_s}};
      end_attempt("failed", now_s);
      state_ = "failed";
      return;
    case Event::kNoProgress:
      failure_ = {{"no_progress", true},
                  {"restarts_without_progress", get_or(f, "restarts_without_progress", 0)},
                  {"resume_step", f.value("resume_step", json())},
                  {"exitcode", get_or(f, "exit_code", 0)},
                  {"summary", fmt::format("stopped: {} restart(s) in a row made no progress (--stop-without-progress)",
                                          get_or(f, "restarts_without_progress", 0))},
                  {"time", now_s}};
      end_attempt("failed", now_s);
      state_ = "failed";
      return;
    case Event::kShutdown:
      exit_code_ = get_or(f, "exit_code", 1);
      if (Attempt* a = current(); a && a->outcome == "running") end_attempt(*exit_code_ == 0 ? "succeeded" : "ended", now_s);
      if (*exit_code_ == 0) state_ = "succeeded";
      else if (state_ != "failed") state_ = "ended";
      return;
    default:
      return;
  }
}

void JobView::on_worker(Event event, const json& f, double now_s) {
  const int rank = get_or(f, "rank", -1);
  Attempt* a = current();
  if (event == Event::kWorkerStart) {
    if (!a) {
      begin_attempt(json::object(), now_s);
      a = current();
    }
    if (a->started_s == 0) {
      a->started_s = now_s;
      workers_.clear();  // the previous attempt's
    }
    a->restart_count = get_or(f, "restart_count", 0);
    ++a->running;
    workers_[rank] = Worker{get_or(f, "local_rank", 0), get_or(f, "pid", 0), a->restart_count, true, {}, {}, now_s};
    return;
  }
  const int code = get_or(f, "exitcode", 0);
  if (auto it = workers_.find(rank); it != workers_.end() && it->second.running) {
    it->second.running = false;
    it->second.exitcode = code;
    it->second.signal = str(f, "signal");
    if (a && a->running > 0) --a->running;
  }
  if (code != 0) {
    const std::string how = f.contains("signal") ? "was killed by " + str(f, "signal")
                                                 : "exited with code " + std::to_string(code);
    json cause = {{"kind", "exit"},
                  {"rank", rank},
                  {"local_rank", get_or(f, "local_rank", 0)},
                  {"exitcode", code},
                  {"host", host_},
                  {"text", fmt::format("rank {} (local rank {} on {}) {}", rank, get_or(f, "local_rank", 0), host_, how)}};
    if (f.contains("signal")) cause["signal"] = str(f, "signal");
    set_cause(std::move(cause));
  }
  if (a && a->running == 0 && a->ended_s == 0) {
    a->ended_s = now_s;
    if (a->outcome == "running") a->outcome = a->cause.is_null() ? "succeeded" : "ended";
  }
}

void JobView::begin_attempt(const json& f, double now_s) {
  if (Attempt* a = current(); a && a->ended_s == 0) end_attempt("new round", now_s);
  Attempt next;
  if (f.contains("round") && f["round"].is_number()) next.round = f["round"].get<std::uint64_t>();
  next.nodes = get_or(f, "group_world_size", 0);
  next.world_size = get_or(f, "world_size", 0);
  next.formed_s = now_s;
  attempts_.push_back(std::move(next));
  if (attempts_.size() > std::max<std::size_t>(limits_.attempts, 2)) {
    attempts_.erase(attempts_.begin() + 1);  // the first attempt stays: how the job began
    ++attempts_dropped_;
  }
}

void JobView::end_attempt(const std::string& outcome, double now_s) {
  Attempt* a = current();
  if (!a) return;
  if (a->ended_s == 0) a->ended_s = now_s;
  if (a->outcome == "running" || a->outcome == "succeeded" || a->outcome == "ended") a->outcome = outcome;
}

// The first cause of an attempt wins: the collateral exits of a stop come after it.
void JobView::set_cause(json cause) {
  Attempt* a = current();
  if (a && a->cause.is_null() && a->outcome == "running") a->cause = std::move(cause);
}

void JobView::note(const std::string& text) {
  Attempt* a = current();
  if (!a) return;
  if (a->notes.size() < limits_.notes) {
    a->notes.push_back(text);
  } else if (a->notes.size() == limits_.notes) {
    a->notes.push_back("(later notes left out)");
  }
}

void JobView::node_event(const std::string& kind, const std::string& text, double now_s) {
  node_events_.push_back({now_s, kind, text});
  while (node_events_.size() > limits_.node_events) node_events_.pop_front();
}

void JobView::sample(const std::vector<hang::RankRecord>& ranks, double now_s) {
  std::vector<std::pair<int, std::uint64_t>> counters;
  counters.reserve(ranks.size());
  for (const auto& r : ranks) {
    std::uint64_t done = r.retired_done;
    for (const auto& g : r.groups) done += g.done;
    counters.emplace_back(r.global_rank, done);
  }
  history_.sample(counters, now_s);
}

void JobView::merge_workers(json& rows, double now_s, const std::function<bool(int)>& logs_here) const {
  std::map<int, std::size_t> at;
  for (std::size_t i = 0; i < rows.size(); ++i) at[get_or(rows[i], "rank", -1)] = i;
  const std::string node = group_rank_ >= 0 ? std::to_string(group_rank_) : "0";
  for (const auto& [rank, w] : workers_) {
    auto it = at.find(rank);
    if (it == at.end()) {
      rows.push_back({{"rank", rank},
                      {"host", host_},
                      {"local_rank", w.local_rank},
                      {"pid", w.pid},
                      {"restarts", w.restart_count},
                      {"lag_s", 0},
                      {"groups", json::array()},
                      {"state", "no_groups"},
                      {"group", nullptr},
                      {"op", nullptr},
                      {"seq", nullptr},
                      {"in_state_s", nullptr}});
      it = at.emplace(rank, rows.size() - 1).first;
    }
    json& row = rows[it->second];
    row["local"] = true;
    row["node"] = node;
    row["logs"] = logs_here ? logs_here(w.local_rank) : false;
    if (!w.running) {
      row["state"] = "exited";
      row["exitcode"] = w.exitcode.value_or(0);
      if (!w.signal.empty()) row["signal"] = w.signal;
    } else if (row.value("state", "") == "no_groups") {
      row["state"] = now_s - w.started_s < kStartingS ? "starting" : "running";
      row["in_state_s"] = rounded(now_s - w.started_s, 1000);
    }
  }
  for (auto& row : rows) {
    if (!row.contains("node")) row["node"] = node;  // this node's records (a worker of an attempt the events missed)
    const auto rate = history_.rate_of(get_or(row, "rank", -1));
    row["rate"] = rate ? json(rounded(*rate, 100)) : json();
  }
  std::sort(rows.begin(), rows.end(), [](const json& a, const json& b) { return get_or(a, "rank", -1) < get_or(b, "rank", -1); });
}

json JobView::attempts_json(double now_s) const {
  json out = json::array();
  std::size_t index = 0;
  for (const auto& a : attempts_) {
    const std::size_t number = index == 0 ? 0 : index + attempts_dropped_;
    ++index;
    const double from = a.started_s > 0 ? a.started_s : a.formed_s;
    json j = {{"attempt", number},
              {"restart_count", a.restart_count < 0 ? json() : json(a.restart_count)},
              {"round", a.round ? json(*a.round) : json()},
              {"nodes", a.nodes},
              {"world_size", a.world_size},
              {"formed_at", a.formed_s},
              {"started_at", a.started_s > 0 ? json(a.started_s) : json()},
              {"ended_at", a.ended_s > 0 ? json(a.ended_s) : json()},
              {"duration_s", rounded((a.ended_s > 0 ? a.ended_s : now_s) - from)},
              {"outcome", a.outcome},
              {"cause", a.cause},
              {"checkpoints", a.checkpoints},
              {"resume_step", a.resume_step ? json(*a.resume_step) : json()},
              {"notes", a.notes}};
    out.push_back(std::move(j));
  }
  return out;
}

json JobView::nodes_json(const json& rows, double now_s) const {
  struct Node {
    std::set<std::string> hosts;
    int ranks = 0, first = -1, last = -1, hung = 0, exited = 0;
    std::vector<double> rates;
  };
  std::map<std::string, Node> nodes;
  for (const auto& r : rows) {
    Node& n = nodes[str(r, "node")];
    const int rank = get_or(r, "rank", -1);
    n.hosts.insert(str(r, "host"));
    ++n.ranks;
    n.first = n.first < 0 ? rank : std::min(n.first, rank);
    n.last = std::max(n.last, rank);
    const std::string state = str(r, "state");
    n.hung += state == "hung";
    n.exited += state == "exited";
    if (r.contains("rate") && r["rate"].is_number()) n.rates.push_back(r["rate"].get<double>());
  }
  json list = json::array();
  for (auto& [id, n] : nodes) {
    json median;
    if (!n.rates.empty()) {
      std::sort(n.rates.begin(), n.rates.end());
      median = n.rates[n.rates.size() / 2];
    }
    list.push_back({{"node", id},
                    {"hosts", std::vector<std::string>(n.hosts.begin(), n.hosts.end())},
                    {"ranks", n.ranks},
                    {"first_rank", n.first},
                    {"last_rank", n.last},
                    {"hung", n.hung},
                    {"exited", n.exited},
                    {"median_rate", median},
                    {"self", id == (group_rank_ >= 0 ? std::to_string(group_rank_) : "0")}});
  }
  std::sort(list.begin(), list.end(), [](const json& a, const json& b) {
    return get_or(a, "first_rank", 0) < get_or(b, "first_rank", 0);
  });
  json events = json::array();
  for (const auto& e : node_events_) events.push_back({{"time", e.t}, {"kind", e.kind}, {"text", e.text}});
  return {{"self",
           {{"group_rank", group_rank_},
            {"host", host_},
            {"health_check_failures", health_failures_},
            {"step_outs", step_outs_},
            {"cooldown_left_s", cooldown_until_s_ > now_s ? json(rounded(cooldown_until_s_ - now_s)) : json()}}},
          {"nodes", std::move(list)},
          {"spares_waiting", nodes_waiting_},
          {"events", std::move(events)}};
}

json JobView::model(json table, double now_s, const std::function<bool(int)>& logs_here) const {
  if (!table.is_object()) table = json::object();
  if (!table.contains("ranks")) table["ranks"] = json::array();
  for (const char* key : {"hangs", "p2p_waits"})
    if (!table.contains(key)) table[key] = json::array();
  json& rows = table["ranks"];
  merge_workers(rows, now_s, logs_here);
  // A hang's culprits stand out: "hung", whatever their record says.
  std::set<int> hung;
  for (const auto& h : table["hangs"])
    for (const auto& c : h.value("not_entered", json::array())) hung.insert(get_or(c, "rank", -1));
  for (auto& row : rows)
    if (hung.count(get_or(row, "rank", -1)) && str(row, "state") != "exited") row["state"] = "hung";
  const int restarts_used = remaining_restarts_ >= 0 ? max_restarts_ - remaining_restarts_ : 0;
  table["job"] = {{"run_id", run_id_},
                  {"state", state_},
                  {"host", host_},
                  {"group_rank", group_rank_},
                  {"nproc_per_node", nproc_per_node_},
                  {"nodes", attempts_.empty() ? 0 : attempts_.back().nodes},
                  {"world_size", attempts_.empty() ? 0 : attempts_.back().world_size},
                  {"max_restarts", max_restarts_},
                  {"restarts", restarts_used},
                  {"attempts", attempts_.size() + attempts_dropped_},
                  {"attempts_left_out", attempts_dropped_},
                  {"started_at", started_s_},
                  {"now", now_s},
                  {"exit_code", exit_code_ ? json(*exit_code_) : json()},
                  {"newest_step", newest_step_ ? json(*newest_step_) : json()},
                  {"job_rate", history_.job_rate() ? json(rounded(*history_.job_rate(), 100)) : json()}};
  table["attempts"] = attempts_json(now_s);
  json progress = history_.to_json(now_s);
  progress.erase("ranks");  // per rank: /progress.json (each row has its newest "rate")
  table["progress"] = std::move(progress);
  table["nodes"] = nodes_json(rows, now_s);
  table["failure"] = failure_;
  return table;
}

}  // namespace ctrun::agent::status
