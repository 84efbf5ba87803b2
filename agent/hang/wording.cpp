#include "agent/hang/wording.hpp"

#include <cmath>
#include <cstdio>

#include "common/progress.hpp"

namespace ctrun::agent::hang {
namespace {

const RankRecord* find_rank(const std::vector<RankRecord>& ranks, int global_rank) {
  for (const auto& r : ranks) {
    if (r.global_rank == global_rank) return &r;
  }
  return nullptr;
}

std::string rank_list(const std::vector<int>& ranks) {
  std::string out;
  for (int r : ranks) {
    if (!out.empty()) out += ',';
    out += std::to_string(r);
  }
  return out;
}

std::string who(const Member& m, const std::vector<RankRecord>& ranks) {
  if (m.global_rank < 0) return "group rank " + std::to_string(m.group_rank) + " (no record: not seen yet)";
  std::string out = "rank " + std::to_string(m.global_rank);
  if (const RankRecord* r = find_rank(ranks, m.global_rank)) {
    out += " (host " + (r->host.empty() ? std::string("?") : r->host) + ", local_rank " +
           std::to_string(r->local_rank) + ", pid " + std::to_string(r->pid) + ")";
  }
  return out;
}

// What a rank is doing, for a p2p report's peer: "inside all_reduce #7 of group 0 for 3.0 s", "itself waiting
// in recv from rank 1 for 5 min 0 s", "between ops for 2.0 s", "no record seen".
std::string doing(const RankRecord* r, const std::vector<RankRecord>& ranks) {
  if (!r) return "no record seen";
  const GroupRecord* g = shown_group(*r);
  if (!g) return "no groups";
  if (g->running) {
    return "inside " + progress::op_name(g->op) + " #" + std::to_string(g->seq) + " of group " +
           std::to_string(g->ordinal) + " for " + human_seconds(g->in_state_s);
  }
  if (g->p2p_pending > 0) {
    return "itself waiting in " + p2p_words(g->p2p_recv, global_rank_of(ranks, g->group_id, g->p2p_peer), g->p2p_peer) +
           " for " + human_seconds(g->p2p_s);
  }
  return "between ops for " + human_seconds(g->in_state_s);
}

std::string possible_hang(const DetectorConfig& c) {
  return " (possible hang; reported after " + human_seconds(c.report_after_s);
}

std::string hang_timeout(const DetectorConfig& c) { return " (hang timeout " + human_seconds(c.hang_timeout_s) + ")"; }

Said said(const HangFinding& h, const std::vector<RankRecord>& ranks, const DetectorConfig& c) {
  const std::string line = describe(h, ranks);
  Said s{.warning = h.kind != HangFinding::Kind::kResolved, .line = line, .event = event_of(h), .fields = to_json(h)};
  if (h.kind == HangFinding::Kind::kVerdict) s.line += hang_timeout(c);
  if (h.kind == HangFinding::Kind::kReport) s.line += possible_hang(c) + ", not acted on)";
  return s;
}

Said said(const P2pFinding& w, const std::vector<RankRecord>& ranks, const DetectorConfig& c) {
  Said s{.warning = w.kind != P2pFinding::Kind::kResolved,
         .line = describe(w, ranks),
         .event = event_of(w),
         .fields = to_json(w)};
  if (s.warning) s.line += possible_hang(c) + ", never acted on: point-to-point waits are only reported)";
  return s;
}

std::string stack_title(const LocalWorker& w) {
  return "stack of rank " + std::to_string(w.global_rank) + " (pid " + std::to_string(w.pid) + ", " + w.stack_file +
         "):";
}

std::string no_stack_words(NoStack none, double dump_wait_s) {
  switch (none) {
    case NoStack::kNoStackFile:
      return "no stack file: ctrun runs with --log-dir /dev/null";
    case NoStack::kNoHandler:
      return "no stack handler: not a Python worker with ctrun's sitecustomize.py on its path (python -S or -I, a "
             "PYTHONPATH of its own, a C++ worker), or still starting";
    case NoStack::kExited:
      return "the worker has exited";
    case NoStack::kNotWritten:
      return "no stack was written within " + human_seconds(dump_wait_s) +
             " (is it stopped, or in uninterruptible I/O?)";
    case NoStack::kNone:
      break;
  }
  return {};
}

}  // namespace

const GroupRecord* shown_group(const RankRecord& r) {
  const GroupRecord* out = nullptr;
  auto rank_of = [](const GroupRecord& g) { return g.running ? 2 : g.p2p_pending > 0 ? 1 : 0; };
  for (const auto& g : r.groups) {
    const int a = rank_of(g), b = out ? rank_of(*out) : -1;
    if (a > b || (a == b && a == 2 && g.in_state_s > out->in_state_s) || (a == b && a == 1 && g.p2p_s > out->p2p_s) ||
        (a == b && a == 0 && g.in_state_s < out->in_state_s)) {
      out = &g;
    }
  }
  return out;
}

std::string human_seconds(double s) {
  char buf[64];
  if (s < 1) {
    std::snprintf(buf, sizeof buf, "%.0f ms", s * 1000);
  } else if (s < 120) {
    std::snprintf(buf, sizeof buf, "%.1f s", s);
  } else {
    const long long t = std::llround(s);
    std::snprintf(buf, sizeof buf, "%lld min %lld s", t / 60, t % 60);
  }
  return buf;
}

std::string p2p_words(bool recv, int peer, int peer_group_rank) {
  return std::string(recv ? "recv from " : "send to ") +
         (peer >= 0 ? "rank " + std::to_string(peer) : "group rank " + std::to_string(peer_group_rank));
}

std::string describe(const HangFinding& f, const std::vector<RankRecord>& ranks) {
  const std::string op =
      progress::op_name(f.op) + " #" + std::to_string(f.seq) + " of group " + std::to_string(f.group_ordinal);
  const std::string waited = human_seconds(f.waited_s);
  std::string out;
  if (f.kind == HangFinding::Kind::kResolved) {
    return op + " went on after " + waited + " (reported as a possible hang)";
  }
  if (f.culprits.empty()) {
    out = "every rank of group " + std::to_string(f.group_ordinal) + " (" + rank_list(f.waiting) + ") is inside " + op +
          " and none finished it for " + waited;
    if (!f.waited_for.empty()) out += "; they wait for rank(s) " + rank_list(f.waited_for);
  } else {
    for (std::size_t i = 0; i < f.culprits.size(); ++i) {
      const Member& c = f.culprits[i];
      out += (i ? "; " : "") + who(c, ranks);
      if (c.blocked_in_group >= 0) {
        out += " (itself waiting in " + progress::op_name(c.blocked_in_op) + " #" + std::to_string(c.blocked_in_seq) +
               " of group " + std::to_string(c.blocked_in_group) + ")";
      } else if (c.p2p_group >= 0) {
        out += " (itself waiting in " + std::string(c.p2p_recv ? "recv from " : "send to ") +
               (c.p2p_peer >= 0 ? "rank " + std::to_string(c.p2p_peer) : "a peer with no record") + " of group " +
               std::to_string(c.p2p_group) + ")";
      }
    }
    out += (f.culprits.size() == 1 ? " has" : " have") + std::string(" not entered ") + op + "; " +
           (f.waiting.size() == 1 ? "rank " : "ranks ") + rank_list(f.waiting) +
           (f.waiting.size() == 1 ? " has" : " have") + " waited " + waited;
  }
  return out;
}

std::string describe(const P2pFinding& f, const std::vector<RankRecord>& ranks) {
  const std::string op = p2p_words(f.recv, f.peer, f.peer_group_rank) + " of group " + std::to_string(f.group_ordinal);
  Member m;
  m.global_rank = f.global_rank;
  if (f.kind == P2pFinding::Kind::kResolved)
    return who(m, ranks) + ": " + op + " finished after " + human_seconds(f.waited_s);
  return who(m, ranks) + " has waited " + human_seconds(f.waited_s) + " in " + op + " (" + std::to_string(f.bytes) +
         " bytes" + (f.pending > 1 ? ", " + std::to_string(f.pending) + " point-to-point ops pending" : "") +
         "); rank " + (f.peer >= 0 ? std::to_string(f.peer) : "?") + ": " +
         doing(f.peer >= 0 ? find_rank(ranks, f.peer) : nullptr, ranks);
}

std::string describe(const StragglerFinding& f) {
  return "rank " + std::to_string(f.global_rank) + " is last into the collectives of group " +
         std::to_string(f.group_ordinal) + ": " + human_seconds(f.lag_s) + " per op behind the others' median (" +
         std::to_string(f.ops) + " ops in " + human_seconds(f.window_s) + "; median over recent windows " +
         human_seconds(f.median_lag_s) + ")";
}

Event event_of(const HangFinding& f) {
  switch (f.kind) {
    case HangFinding::Kind::kReport:
      return Event::kHangSuspected;
    case HangFinding::Kind::kVerdict:
      return Event::kHangTimeout;
    case HangFinding::Kind::kResolved:
      break;
  }
  return Event::kHangResolved;
}

Event event_of(const P2pFinding& f) {
  return f.kind == P2pFinding::Kind::kReport ? Event::kP2pWait : Event::kP2pWaitResolved;
}

nlohmann::json to_json(const HangFinding& f) {
  nlohmann::json culprits = nlohmann::json::array();
  for (const auto& c : f.culprits) {
    nlohmann::json j{{"rank", c.global_rank}, {"group_rank", c.group_rank}};
    if (c.blocked_in_group >= 0) {
      j["waiting_in"] = {
          {"group", c.blocked_in_group}, {"op", progress::op_name(c.blocked_in_op)}, {"seq", c.blocked_in_seq}};
    }
    culprits.push_back(j);
  }
  return {{"group", f.group_ordinal},
          {"group_size", f.group_size},
          {"op", progress::op_name(f.op)},
          {"dtype", progress::dtype_name(f.dtype)},
          {"bytes", f.bytes},
          {"seq", f.seq},
          {"not_entered", culprits},
          {"waiting", f.waiting},
          {"waited_s", std::round(f.waited_s * 1000) / 1000},
          {"waited_for", f.waited_for},
          {"to_fail", f.to_fail}};
}

nlohmann::json to_json(const P2pFinding& f) {
  return {{"rank", f.global_rank},
          {"group", f.group_ordinal},
          {"op", f.recv ? "recv" : "send"},
          {"peer", f.peer},
          {"peer_group_rank", f.peer_group_rank},
          {"bytes", f.bytes},
          {"pending", f.pending},
          {"waited_s", std::round(f.waited_s * 1000) / 1000}};
}

nlohmann::json to_json(const StragglerFinding& f) {
  return {{"group", f.group_ordinal},
          {"rank", f.global_rank},
          {"lag_s", std::round(f.lag_s * 1e4) / 1e4},
          {"median_lag_s", std::round(f.median_lag_s * 1e4) / 1e4},
          {"ops", f.ops},
          {"window_s", std::round(f.window_s * 10) / 10}};
}

std::vector<Said> say(const WatchOutput& out, const std::vector<RankRecord>& ranks, const DetectorConfig& config) {
  std::vector<Said> all;
  for (const auto& h : out.findings.hangs) all.push_back(said(h, ranks, config));
  for (const auto& w : out.findings.p2p) all.push_back(said(w, ranks, config));
  for (const auto& s : out.findings.stragglers) {
    all.push_back({.line = describe(s), .event = Event::kStraggler, .fields = to_json(s)});
  }
  if (out.learned) {
    const Learned& l = *out.learned;
    char multiple[16];
    std::snprintf(multiple, sizeof multiple, "%g", l.multiple);
    all.push_back({.line = "hang timeout (auto): " + human_seconds(l.timeout_s) + " = " + multiple +
                           " x the longest gap between completed collectives (" + human_seconds(l.longest_gap_s) +
                           " after " + std::to_string(l.completed) + " of them), within " +
                           human_seconds(l.floor_s) + " - " + human_seconds(l.ceiling_s),
                   .event = Event::kHangTimeoutLearned,
                   .fields = {{"timeout_s", std::round(l.timeout_s * 1000) / 1000},
                              {"longest_gap_s", std::round(l.longest_gap_s * 1000) / 1000},
                              {"completed", l.completed}}});
  }
  if (out.quiet_s) {
    all.push_back({.warning = true,
                   .line = "no local rank has used CPU time or written output for " + human_seconds(*out.quiet_s) +
                           " (workers without ctrun's collectives: possible hang; stacks dumped)",
                   .event = Event::kQuiet,
                   .fields = {{"quiet_s", *out.quiet_s}}});
  }
  return all;
}

std::string stack_words(const RankStack& s) {
  return stack_title(s.worker) + "\n" + (s.text.empty() ? "(no stack was written)\n" : s.text);
}

std::string requested_stacks_words(const std::vector<RankStack>& stacks, const std::string& host, double dump_wait_s) {
  std::string out = stacks.empty() ? "no workers are running on this node\n" : "";
  for (const auto& s : stacks) {
    out += "stack of rank " + std::to_string(s.worker.global_rank) + " (host " + host + ", local_rank " +
           std::to_string(s.worker.local_rank) + ", pid " + std::to_string(s.worker.pid) + "):\n";
    out += s.text.empty() ? "(" + no_stack_words(s.none, dump_wait_s) + ")\n" : s.text;
    if (out.back() != '\n') out += '\n';
  }
  return out;
}

std::string failure_note(const Failure& f, const std::vector<RankRecord>& ranks, const DetectorConfig& config) {
  const std::string& file = f.worker.stack_file;
  if (!f.verdict) return f.remote_note + " (the verdict of group rank 0's agent; its stack: " + file + ")";
  return describe(*f.verdict, ranks) + hang_timeout(config) + (file.empty() ? "" : "; its stack: " + file);
}

Verdicts verdicts_of(const Detector& detector, const std::vector<RankRecord>& ranks) {
  Verdicts v;
  for (const auto& h : detector.open_hangs()) {
    if (h.to_fail.empty()) continue;
    v.ranks.insert(v.ranks.end(), h.to_fail.begin(), h.to_fail.end());
    v.notes.push_back(describe(h, ranks));
  }
  return v;
}

}  // namespace ctrun::agent::hang
