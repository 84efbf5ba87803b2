#include "agent/hang/table.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>

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

// The group a rank's table row shows: the op it has waited in longest, else its most recent group.
const GroupRecord* shown_group(const RankRecord& r) {
  const GroupRecord* out = nullptr;
  for (const auto& g : r.groups) {
    if (!out || (g.running && (!out->running || g.in_state_s > out->in_state_s)) ||
        (!g.running && !out->running && g.in_state_s < out->in_state_s)) {
      out = &g;
    }
  }
  return out;
}

}  // namespace

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
      }
    }
    out += (f.culprits.size() == 1 ? " has" : " have") + std::string(" not entered ") + op + "; " +
           (f.waiting.size() == 1 ? "rank " : "ranks ") + rank_list(f.waiting) +
           (f.waiting.size() == 1 ? " has" : " have") + " waited " + waited;
  }
  return out;
}

std::string describe(const StragglerFinding& f) {
  return "rank " + std::to_string(f.global_rank) + " is last into the collectives of group " +
         std::to_string(f.group_ordinal) + ": " + human_seconds(f.lag_s) + " per op behind the others' median (" +
         std::to_string(f.ops) + " ops in " + human_seconds(f.window_s) + "; median over recent windows " +
         human_seconds(f.median_lag_s) + ")";
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
  const char* kind = f.kind == HangFinding::Kind::kReport    ? "hang_suspected"
                     : f.kind == HangFinding::Kind::kVerdict ? "hang_timeout"
                                                             : "hang_resolved";
  return {{"event", kind},
          {"group", f.group_ordinal},
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

nlohmann::json to_json(const StragglerFinding& f) {
  return {{"event", "straggler"},
          {"group", f.group_ordinal},
          {"rank", f.global_rank},
          {"lag_s", std::round(f.lag_s * 1e4) / 1e4},
          {"median_lag_s", std::round(f.median_lag_s * 1e4) / 1e4},
          {"ops", f.ops},
          {"window_s", std::round(f.window_s * 10) / 10}};
}

nlohmann::json table_json(const std::vector<RankRecord>& ranks, const Detector& detector) {
  nlohmann::json rows = nlohmann::json::array();
  std::vector<const RankRecord*> sorted;
  for (const auto& r : ranks) sorted.push_back(&r);
  std::sort(sorted.begin(), sorted.end(), [](auto* a, auto* b) { return a->global_rank < b->global_rank; });
  for (const RankRecord* r : sorted) {
    nlohmann::json groups = nlohmann::json::array();
    for (const auto& g : r->groups) {
      groups.push_back({{"group", g.ordinal},
                        {"group_rank", g.group_rank},
                        {"group_size", g.group_size},
                        {"state", g.running ? "in_op" : "between_ops"},
                        {"op", progress::op_name(g.op)},
                        {"seq", g.seq},
                        {"issued", g.issued},
                        {"in_state_s", std::round(g.in_state_s * 1000) / 1000},
                        {"wait_peer", g.wait_peer},
                        {"done", g.done},
                        {"failed", g.failed}});
    }
    rows.push_back({{"rank", r->global_rank},
                    {"host", r->host},
                    {"local_rank", r->local_rank},
                    {"pid", r->pid},
                    {"restarts", r->restarts},
                    {"lag_s", std::round(detector.lag_of(r->global_rank) * 1e4) / 1e4},
                    {"groups_not_watched", r->overflow},
                    {"groups", groups}});
  }
  nlohmann::json hangs = nlohmann::json::array();
  for (const auto& h : detector.open_hangs()) hangs.push_back(to_json(h));
  return {{"ranks", rows}, {"hangs", hangs}};
}

std::string table_text(const std::vector<RankRecord>& ranks, const Detector& detector) {
  std::vector<const RankRecord*> sorted;
  for (const auto& r : ranks) sorted.push_back(&r);
  std::sort(sorted.begin(), sorted.end(), [](auto* a, auto* b) { return a->global_rank < b->global_rank; });
  std::string out;
  char line[256];
  std::snprintf(line, sizeof line, "%-5s %-16s %-5s %-8s %-11s %-5s %-14s %-6s %-12s %-8s %s\n", "rank", "host",
                "local", "pid", "state", "group", "op", "seq", "time in it", "restarts", "lag/op");
  out += line;
  for (const RankRecord* r : sorted) {
    const GroupRecord* g = shown_group(*r);
    std::snprintf(line, sizeof line, "%-5d %-16s %-5d %-8d %-11s %-5s %-14s %-6s %-12s %-8d %s\n", r->global_rank,
                  r->host.substr(0, 16).c_str(), r->local_rank, r->pid,
                  !g           ? "no groups"
                  : g->running ? "in op"
                               : "between ops",
                  g ? std::to_string(g->ordinal).c_str() : "-", g ? progress::op_name(g->op).c_str() : "-",
                  g ? std::to_string(g->seq).c_str() : "-", g ? human_seconds(g->in_state_s).c_str() : "-", r->restarts,
                  human_seconds(detector.lag_of(r->global_rank)).c_str());
    out += line;
  }
  for (const auto& h : detector.open_hangs()) out += "hang: " + describe(h, ranks) + "\n";
  return out;
}

}  // namespace ctrun::agent::hang
