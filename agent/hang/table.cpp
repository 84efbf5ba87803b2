#include "agent/hang/table.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "agent/hang/wording.hpp"
#include "common/progress.hpp"

namespace ctrun::agent::hang {

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
  for (const auto& h : detector.open_hangs()) {
    hangs.push_back(to_json(h));
    hangs.back()["event"] = event_name(event_of(h));
  }
  nlohmann::json p2p = nlohmann::json::array();
  for (const auto& w : detector.open_p2p_waits()) {
    p2p.push_back(to_json(w));
    p2p.back()["event"] = event_name(event_of(w));
  }
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
