#include "agent/hang/watch.hpp"

#include <algorithm>

#include "agent/hang/stacks.hpp"
#include "common/worker_env.hpp"

namespace ctrun::agent::hang {

HangWatch::HangWatch(WatchConfig config)
    : config_(std::move(config)), detector_(config_.detector), learner_(config_.auto_timeout.value_or(AutoTimeout{})) {}
HangWatch::~HangWatch() = default;

void HangWatch::begin_attempt(int attempt, int restarts) {
  region_.reset();
  restarts_ = restarts;
  workers_.clear();
  dumps_.clear();
  fails_.clear();
  failed_.clear();
  asked_.clear();
  asking_ = false;
  quiet_ = QuietWatch();
  quiet_reported_ = false;
  completed_ = 0;
  if (config_.auto_timeout) {
    learner_.reset();
    told_timeout_s_ = 0;
    detector_.set_hang_timeout(learner_.current().timeout_s);  // the ceiling until the warm-up is over
  }
  region_ = std::make_unique<Region>(config_.agent_pid, attempt, config_.local_ranks, config_.shm_dir);
}

std::map<std::string, std::string> HangWatch::env_for(int, const std::string& stack_file) const {
  std::map<std::string, std::string> env;
  if (region_) env[worker_env::kProgressFile] = region_->path();
  if (!stack_file.empty()) {
    env[worker_env::kStackFile] = stack_file;
    env[worker_env::kStackSignal] = std::to_string(stack_signal());
  }
  return env;
}

void HangWatch::set_workers(std::vector<LocalWorker> workers) { workers_ = std::move(workers); }

void HangWatch::note_output(int local_rank, double now_s) { last_output_[local_rank] = now_s; }

void HangWatch::end_attempt() {
  note_completed(local_records());  // what the workers did since the last tick, read before the region goes
  region_.reset();
  workers_.clear();
  last_local_.clear();
  dumps_.clear();
  fails_.clear();
  asked_.clear();
  asking_ = false;
}

std::vector<RankRecord> HangWatch::local_records() const {
  std::vector<RankRecord> out;
  if (!region_) return out;
  for (const auto& w : workers_) {
    RankRecord r = region_->read(w.local_rank);
    r.global_rank = w.global_rank;
    r.local_rank = w.local_rank;
    r.pid = w.pid;
    r.host = config_.host;
    r.restarts = restarts_;
    out.push_back(std::move(r));
  }
  return out;
}

const LocalWorker* HangWatch::worker_of(int global_rank) const {
  for (const auto& w : workers_) {
    if (w.global_rank == global_rank) return &w;
  }
  return nullptr;
}

const LocalWorker* HangWatch::worker_at(int local_rank) const {
  for (const auto& w : workers_) {
    if (w.local_rank == local_rank) return &w;
  }
  return nullptr;
}

void HangWatch::request_dumps(double now_s) {
  for (const auto& w : workers_) {
    if (w.stack_file.empty() || dumps_.count(w.local_rank)) continue;
    const auto offset = file_size(w.stack_file);
    if (request_dump(w.pid, w.stack_file) != DumpRequest::kSent) continue;
    dumps_[w.local_rank] = PendingDump{.offset = offset, .until_s = now_s + config_.dump_wait_s};
  }
}

void HangWatch::show_dump(const LocalWorker& w) {
  auto it = dumps_.find(w.local_rank);
  if (it == dumps_.end() || it->second.shown) return;
  it->second.show = it->second.shown = true;
}

namespace {

// The dump a worker wrote past `offset`, once it is all written (empty while it is not, or none came).
std::string finished_dump(const LocalWorker& w, std::uint64_t offset) {
  auto head = read_head(w.stack_file, w.pid);
  if (!head || dump_in_progress(w.pid, head->thread, stack_signal())) return {};
  return last_dump(w.stack_file, offset, head->ident);
}

NoStack why_no_dump(DumpRequest r) {
  switch (r) {
    case DumpRequest::kNoHandler:
      return NoStack::kNoHandler;
    case DumpRequest::kGone:
      return NoStack::kExited;
    case DumpRequest::kSent:
      break;
  }
  return NoStack::kNone;
}

}  // namespace

void HangWatch::request_stacks(double now_s) {
  if (asking_) return;
  asking_ = true;
  asked_until_s_ = now_s + config_.dump_wait_s;
  asked_.clear();
  for (const auto& w : workers_) {
    AskedStack a{.stack = {.worker = w}};
    if (w.stack_file.empty()) {
      a.stack.none = NoStack::kNoStackFile;
    } else {
      a.offset = file_size(w.stack_file);
      a.stack.none = why_no_dump(request_dump(w.pid, w.stack_file));
    }
    asked_.push_back(std::move(a));
  }
}

std::optional<std::vector<RankStack>> HangWatch::collect_asked(double now_s) {
  if (!asking_) return std::nullopt;
  bool complete = true;
  for (auto& a : asked_) {
    if (a.stack.none != NoStack::kNone || !a.stack.text.empty()) continue;
    a.stack.text = finished_dump(a.stack.worker, a.offset);
    complete &= !a.stack.text.empty();
  }
  if (!complete && now_s < asked_until_s_) return std::nullopt;
  std::vector<RankStack> out;
  for (auto& a : asked_) {
    if (a.stack.none == NoStack::kNone && a.stack.text.empty()) a.stack.none = NoStack::kNotWritten;
    out.push_back(std::move(a.stack));
  }
  asking_ = false;
  asked_.clear();
  return out;
}

WatchOutput HangWatch::tick(double now_s) {
  WatchOutput out;
  read_records(now_s);
  out.learned = learn(now_s);
  out.findings = detector_.observe(now_s, last_all_);
  act_on(out.findings, now_s);
  out.quiet_s = watch_quiet(now_s);
  out.stacks = collect_shown_stacks(now_s);
  out.failures = due_failures(now_s);
  out.requested_stacks = collect_asked(now_s);
  return out;
}

// This node's records, and every rank of the job: these and the other nodes' (a rank of this node counted once).
void HangWatch::note_completed(const std::vector<RankRecord>& local) {
  for (const auto& r : local) {
    completed_ = std::max(completed_, r.retired_done);  // a group that went before this read
    for (const auto& g : r.groups) completed_ = std::max(completed_, g.done);
  }
}

void HangWatch::read_records(double now_s) {
  last_local_ = local_records();
  note_completed(last_local_);
  last_all_ = last_local_;
  for (auto& r : remote_.ranks(now_s)) {
    bool mine = false;
    for (const auto& l : last_local_) mine |= l.global_rank == r.global_rank;
    if (!mine) last_all_.push_back(std::move(r));
  }
}

// A report or verdict asks every local worker for its stack and puts the culprits' onto the console; a verdict's
// culprits on this node are failed once their stack is in (or dump_wait_s passed): the kill must not overtake the
// dump.
void HangWatch::act_on(const Findings& f, double now_s) {
  for (const auto& h : f.hangs) {
    if (h.kind == HangFinding::Kind::kResolved) continue;
    request_dumps(now_s);
    for (const auto& c : h.culprits) {
      if (const LocalWorker* w = worker_of(c.global_rank)) show_dump(*w);
    }
    if (h.kind != HangFinding::Kind::kVerdict) continue;
    for (int g : h.to_fail) {
      if (const LocalWorker* w = worker_of(g))
        fails_[w->local_rank] = {.due_s = now_s + config_.dump_wait_s, .verdict = h};
    }
  }
  for (const auto& w : f.p2p) {
    if (w.kind != P2pFinding::Kind::kResolved) request_dumps(now_s);
  }
}

// `--hang-timeout auto`: this node's records teach the learner; the detector applies what it says from this look
// on. Said when first learned (past the warm-up) and when it rises by a tenth or more, so a log shows every value
// that mattered without a line per tick.
std::optional<Learned> HangWatch::learn(double now_s) {
  if (!config_.auto_timeout) return std::nullopt;
  const Learned l = learner_.observe(now_s, last_local_);
  detector_.set_hang_timeout(l.timeout_s);
  if (!l.warm || (told_timeout_s_ > 0 && l.timeout_s < told_timeout_s_ * 1.1)) return std::nullopt;
  told_timeout_s_ = l.timeout_s;
  return l;
}

// Workers without records (torch's own gloo/NCCL): the quiet rule, reported and dumped, never acted on.
std::optional<double> HangWatch::watch_quiet(double now_s) {
  bool any_records = false;
  for (const auto& r : last_local_) any_records |= !r.groups.empty();
  if (any_records || workers_.empty()) return std::nullopt;
  std::vector<QuietSample> samples;
  for (const auto& w : workers_) {
    auto cpu = cpu_seconds(w.pid);
    if (!cpu) continue;
    auto o = last_output_.find(w.local_rank);
    samples.push_back({w.global_rank, *cpu, o == last_output_.end() ? -1 : o->second});
  }
  const double quiet = quiet_.observe(now_s, samples);
  if (quiet < config_.detector.report_after_s) {
    quiet_reported_ = false;
    return std::nullopt;
  }
  if (quiet_reported_) return std::nullopt;
  quiet_reported_ = true;
  dumps_.clear();
  request_dumps(now_s);
  return quiet;
}

// Dumps asked for earlier: the culprits' onto the console once written (or given up after dump_wait_s).
std::vector<RankStack> HangWatch::collect_shown_stacks(double now_s) {
  std::vector<RankStack> out;
  for (auto& [local_rank, d] : dumps_) {
    if (!d.show) continue;
    const LocalWorker* w = worker_at(local_rank);
    if (!w) continue;
    const std::string dump = finished_dump(*w, d.offset);
    if (dump.empty() && now_s < d.until_s) continue;
    out.push_back({.worker = *w, .text = dump, .none = dump.empty() ? NoStack::kNotWritten : NoStack::kNone});
    d.show = false;
    d.text = dump;
  }
  return out;
}

// Verdicts whose culprit's stack is in (or is overdue): handed out once each.
std::vector<Failure> HangWatch::due_failures(double now_s) {
  std::vector<Failure> out;
  for (auto it = fails_.begin(); it != fails_.end();) {
    auto d = dumps_.find(it->first);
    const bool stack_done = d == dumps_.end() || !d->second.show;
    if (!stack_done && now_s < it->second.due_s) {
      ++it;
      continue;
    }
    Failure f;
    f.worker.local_rank = it->first;
    if (const LocalWorker* w = worker_at(it->first)) f.worker = *w;
    f.verdict = it->second.verdict;
    f.remote_note = it->second.remote_note;
    if (d != dumps_.end()) f.stack = d->second.text;
    out.push_back(std::move(f));
    failed_.insert(it->first);
    it = fails_.erase(it);
  }
  return out;
}

std::optional<std::string> HangWatch::summary_due(double now_s, int nodes) {
  NodeSummary s;
  s.restarts = restarts_;
  s.host = config_.host;
  s.ranks = last_local_;
  const std::string content = content_of(s);
  if (!pacer_.due(now_s, nodes, content, stalled())) return std::nullopt;
  pacer_.published(now_s, content);
  s.counter = ++counter_;
  return encode(s);
}

bool HangWatch::stalled() const {
  return hang::stalled(last_local_, std::max(2.0, detector_.config().report_after_s / 2));
}

void HangWatch::remote(const std::string& node, const std::string& text, double now_s) {
  if (auto s = decode(text)) remote_.update(node, *s, now_s);
}

void HangWatch::remote_verdicts(const Verdicts& v, double now_s) {
  const std::string note = v.notes.empty() ? std::string() : v.notes.front();
  for (int g : v.ranks) {
    const LocalWorker* w = worker_of(g);
    if (!w || fails_.count(w->local_rank) || failed_.count(w->local_rank)) continue;
    request_dumps(now_s);
    show_dump(*w);
    fails_[w->local_rank] = {.due_s = now_s + config_.dump_wait_s, .remote_note = note};
  }
}

}  // namespace ctrun::agent::hang
