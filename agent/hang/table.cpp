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

// The group a rank's table row shows: the op it has waited in longest, else the point-to-point op pending
// longest, else its most recent group.
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

// "recv from 2", "send to 5" (a peer with no record seen: "recv from group rank 3").
std::string p2p_words(bool recv, int peer, int peer_group_rank) {
  return std::string(recv ? "recv from " : "send to ") +
         (peer >= 0 ? "rank " + std::to_string(peer) : "group rank " + std::to_string(peer_group_rank));
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

nlohmann::json to_json(const P2pFinding& f) {
  return {{"event", f.kind == P2pFinding::Kind::kReport ? "p2p_wait" : "p2p_wait_resolved"},
          {"rank", f.global_rank},
          {"group", f.group_ordinal},
          {"op", f.recv ? "recv" : "send"},
          {"peer", f.peer},
          {"peer_group_rank", f.peer_group_rank},
          {"bytes", f.bytes},
          {"pending", f.pending},
          {"waited_s", std::round(f.waited_s * 1000) / 1000}};
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
      nlohmann::json group{{"group", g.ordinal},
                           {"group_rank", g.group_rank},
                           {"group_size", g.group_size},
                           {"state", g.running ? "in_op" : "between_ops"},
                           {"op", progress::op_name(g.op)},
                           {"seq", g.seq},
                           {"issued", g.issued},
                           {"in_state_s", std::round(g.in_state_s * 1000) / 1000},
                           {"wait_peer", g.wait_peer},
                           {"done", g.done},
                           {"failed", g.failed},
                           {"p2p_done", g.p2p_done}};
      if (g.p2p_pending > 0) {
        group["p2p"] = {{"pending", g.p2p_pending},
                        {"op", g.p2p_recv ? "recv" : "send"},
                        {"peer", global_rank_of(ranks, g.group_id, g.p2p_peer)},
                        {"peer_group_rank", g.p2p_peer},
                        {"bytes", g.p2p_bytes},
                        {"waited_s", std::round(g.p2p_s * 1000) / 1000}};
      }
      groups.push_back(group);
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
  nlohmann::json p2p = nlohmann::json::array();
  for (const auto& w : detector.open_p2p_waits()) p2p.push_back(to_json(w));
  return {{"ranks", rows}, {"hangs", hangs}, {"p2p_waits", p2p}};
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
    const bool p2p = g && !g->running && g->p2p_pending > 0;
    const std::string op =
        !g    ? "-"
        : p2p ? (g->p2p_recv ? "recv<-" : "send->") + std::to_string(global_rank_of(ranks, g->group_id, g->p2p_peer))
              : progress::op_name(g->op);
    std::snprintf(line, sizeof line, "%-5d %-16s %-5d %-8d %-11s %-5s %-14s %-6s %-12s %-8d %s\n", r->global_rank,
                  r->host.substr(0, 16).c_str(), r->local_rank, r->pid,
                  !g           ? "no groups"
                  : g->running ? "in op"
                  : p2p        ? "in p2p"
                               : "between ops",
                  g ? std::to_string(g->ordinal).c_str() : "-", op.c_str(),
                  g && !p2p ? std::to_string(g->seq).c_str() : "-",
                  g ? human_seconds(p2p ? g->p2p_s : g->in_state_s).c_str() : "-", r->restarts,
                  human_seconds(detector.lag_of(r->global_rank)).c_str());
    out += line;
  }
  for (const auto& h : detector.open_hangs()) out += "hang: " + describe(h, ranks) + "\n";
  for (const auto& w : detector.open_p2p_waits()) out += "p2p wait: " + describe(w, ranks) + "\n";
  return out;
}

}  // namespace ctrun::agent::hang
