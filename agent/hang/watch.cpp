#include "agent/hang/watch.hpp"

#include <sstream>

#include "agent/hang/stacks.hpp"
#include "agent/hang/table.hpp"
#include "common/worker_env.hpp"

namespace ctrun::agent::hang {

HangWatch::HangWatch(WatchConfig config) : config_(std::move(config)), detector_(config_.detector) {}
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

void HangWatch::request_dumps(double now_s) {
  for (const auto& w : workers_) {
    if (w.stack_file.empty() || dumps_.count(w.local_rank)) continue;
    const auto offset = file_size(w.stack_file);
    if (request_dump(w.pid, w.stack_file) != DumpRequest::kSent) continue;
    dumps_[w.local_rank] = PendingDump{offset, now_s + config_.dump_wait_s, false, ""};
  }
}

namespace {

// The dump a worker wrote past `offset`, once it is all written (empty while it is not, or none came).
std::string finished_dump(const LocalWorker& w, std::uint64_t offset) {
  auto head = read_head(w.stack_file, w.pid);
  if (!head || dump_in_progress(w.pid, head->thread, stack_signal())) return {};
  return last_dump(w.stack_file, offset, head->ident);
}

}  // namespace

void HangWatch::request_stacks(double now_s) {
  if (asking_) return;
  asking_ = true;
  asked_until_s_ = now_s + config_.dump_wait_s;
  asked_.clear();
  for (const auto& w : workers_) {
    AskedStack a{w, 0, "", ""};
    if (w.stack_file.empty()) {
      a.why_none = "no stack file: ctrun runs with --log-dir /dev/null";
    } else {
      a.offset = file_size(w.stack_file);
      const DumpRequest r = request_dump(w.pid, w.stack_file);
      if (r == DumpRequest::kNoHandler) {
        a.why_none =
            "no stack handler: not a Python worker with ctrun's sitecustomize.py on its path (python -S or -I, a "
            "PYTHONPATH of its own, a C++ worker), or still starting";
      } else if (r == DumpRequest::kGone) {
        a.why_none = "the worker has exited";
      }
    }
    asked_.push_back(std::move(a));
  }
}

std::optional<std::string> HangWatch::collect_asked(double now_s) {
  if (!asking_) return std::nullopt;
  bool complete = true;
  for (auto& a : asked_) {
    if (!a.why_none.empty() || !a.text.empty()) continue;
    a.text = finished_dump(a.worker, a.offset);
    complete &= !a.text.empty();
  }
  if (!complete && now_s < asked_until_s_) return std::nullopt;
  std::string out = asked_.empty() ? "no workers are running on this node\n" : "";
  for (const auto& a : asked_) {
    out += "stack of rank " + std::to_string(a.worker.global_rank) + " (host " + config_.host + ", local_rank " +
           std::to_string(a.worker.local_rank) + ", pid " + std::to_string(a.worker.pid) + "):\n";
    if (!a.text.empty()) {
      out += a.text;
    } else {
      out += "(" +
             (a.why_none.empty() ? "no stack was written within " + human_seconds(config_.dump_wait_s) +
                                       " (is it stopped, or in uninterruptible I/O?)"
                                 : a.why_none) +
             ")\n";
    }
    if (out.back() != '\n') out += '\n';
  }
  asking_ = false;
  asked_.clear();
  return out;
}

WatchOutput HangWatch::tick(double now_s) {
  WatchOutput out;
  last_local_ = local_records();
  std::vector<RankRecord> all = last_local_;
  for (auto& r : remote_.ranks(now_s)) {
    bool mine = false;
    for (const auto& l : last_local_) mine |= l.global_rank == r.global_rank;
    if (!mine) all.push_back(std::move(r));
  }
  last_all_ = all;
  const Findings f = detector_.observe(now_s, all);
  for (const auto& h : f.hangs) {
    const std::string line = describe(h, all);
    out.events.push_back(to_json(h));
    if (h.kind == HangFinding::Kind::kResolved) {
      out.infos.push_back(line);
      continue;
    }
    out.warnings.push_back(h.kind == HangFinding::Kind::kVerdict
                               ? line + " (hang timeout " + human_seconds(config_.detector.hang_timeout_s) + ")"
                               : line + " (possible hang; reported after " +
                                     human_seconds(config_.detector.report_after_s) + ", not acted on)");
    request_dumps(now_s);
    for (const auto& c : h.culprits) {
      for (const auto& w : workers_) {
        if (w.global_rank != c.global_rank) continue;
        auto it = dumps_.find(w.local_rank);
        if (it != dumps_.end() && !it->second.title.size()) {
          it->second.show = true;
          it->second.title = "stack of rank " + std::to_string(w.global_rank) + " (pid " + std::to_string(w.pid) +
                             ", " + w.stack_file + "):";
        }
      }
    }
    if (h.kind == HangFinding::Kind::kVerdict) {
      // Failed once its stack is in (or dump_wait_s passed): the kill must not overtake the dump.
      for (int g : h.to_fail) {
        for (const auto& w : workers_) {
          if (w.global_rank != g) continue;
          fails_[w.local_rank] = PendingFail{now_s + config_.dump_wait_s,
                                             line + " (hang timeout " + human_seconds(config_.detector.hang_timeout_s) +
                                                 ")" + (w.stack_file.empty() ? "" : "; its stack: " + w.stack_file)};
        }
      }
    }
  }
  for (const auto& w : f.p2p) {
    out.events.push_back(to_json(w));
    if (w.kind == P2pFinding::Kind::kResolved) {
      out.infos.push_back(describe(w, all));
      continue;
    }
    out.warnings.push_back(describe(w, all) + " (possible hang; reported after " +
                           human_seconds(config_.detector.report_after_s) +
                           ", never acted on: point-to-point waits are only reported)");
    request_dumps(now_s);
  }
  for (const auto& s : f.stragglers) {
    out.infos.push_back(describe(s));
    out.stragglers[s.group_ordinal] = out.infos.back();
    out.events.push_back(to_json(s));
  }

  // Workers without records (torch's own gloo/NCCL): the quiet rule, reported and dumped, never acted on.
  bool any_records = false;
  for (const auto& r : last_local_) any_records |= !r.groups.empty();
  if (!any_records && !workers_.empty()) {
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
    } else if (!quiet_reported_) {
      quiet_reported_ = true;
      out.warnings.push_back("no local rank has used CPU time or written output for " + human_seconds(quiet) +
                             " (workers without ctrun's collectives: possible hang; stacks dumped)");
      out.events.push_back({{"event", "quiet"}, {"quiet_s", quiet}});
      dumps_.clear();
      request_dumps(now_s);
    }
  }

  // Dumps asked for earlier: the culprits' onto the console once written (or given up after dump_wait_s).
  for (auto it = dumps_.begin(); it != dumps_.end(); ++it) {
    PendingDump& d = it->second;
    if (!d.show) continue;
    for (const auto& w : workers_) {
      if (w.local_rank != it->first) continue;
      const std::string dump = finished_dump(w, d.offset);
      if (!dump.empty() || now_s >= d.until_s) {
        out.stacks.push_back(d.title + "\n" + (dump.empty() ? "(no stack was written)\n" : dump));
        d.show = false;
        d.text = dump;
      }
    }
  }
  for (auto it = fails_.begin(); it != fails_.end();) {
    auto d = dumps_.find(it->first);
    const bool stack_done = d == dumps_.end() || !d->second.show;
    if (!stack_done && now_s < it->second.due_s) {
      ++it;
      continue;
    }
    out.fail_local_ranks.push_back(it->first);
    failed_.insert(it->first);
    out.failure_notes[it->first] = it->second.note;
    if (d != dumps_.end()) out.failure_stacks[it->first] = d->second.text;
    it = fails_.erase(it);
  }
  out.requested_stacks = collect_asked(now_s);
  return out;
}

std::optional<std::string> HangWatch::summary_due(double now_s, int nodes) {
  NodeSummary s;
  s.restarts = restarts_;
  s.host = config_.host;
  s.ranks = last_local_;
  const std::string content = content_of(s);
  if (!pacer_.due(now_s, nodes, content)) return std::nullopt;
  pacer_.published(now_s, content);
  s.counter = ++counter_;
  return encode(s);
}

void HangWatch::remote(const std::string& node, const std::string& text, double now_s) {
  if (auto s = decode(text)) remote_.update(node, *s, now_s);
}

std::string HangWatch::verdicts_text() const {
  std::string ranks, notes;
  for (const auto& h : detector_.open_hangs()) {
    for (int r : h.to_fail) ranks += std::to_string(r) + " ";
    if (!h.to_fail.empty()) notes += describe(h, last_all_) + "\n";
  }
  return ranks.empty() ? std::string() : ranks + "\n" + notes;
}

void HangWatch::remote_verdicts(const std::string& text, double now_s) {
  const auto eol = text.find('\n');
  if (eol == std::string::npos) return;
  std::istringstream ranks(text.substr(0, eol));
  const std::string note = text.substr(eol + 1, text.find('\n', eol + 1) - eol - 1);
  int g = 0;
  while (ranks >> g) {
    for (const auto& w : workers_) {
      if (w.global_rank != g || fails_.count(w.local_rank) || failed_.count(w.local_rank)) continue;
      request_dumps(now_s);
      auto d = dumps_.find(w.local_rank);
      if (d != dumps_.end() && d->second.title.empty()) {
        d->second.show = true;
        d->second.title =
            "stack of rank " + std::to_string(g) + " (pid " + std::to_string(w.pid) + ", " + w.stack_file + "):";
      }
      fails_[w.local_rank] =
          PendingFail{now_s + config_.dump_wait_s,
                      note + " (the verdict of group rank 0's agent; its stack: " + w.stack_file + ")"};
    }
  }
}

std::string HangWatch::table_text() const { return hang::table_text(last_all_, detector_); }
nlohmann::json HangWatch::table_json() const { return hang::table_json(last_all_, detector_); }

}  // namespace ctrun::agent::hang
