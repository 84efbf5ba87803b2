#include "agent/hang/table.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "agent/hang/wording.hpp"
#include "common/progress.hpp"

namespace ctrun::agent::hang {
namespace {

double rounded(double s, double scale) { return std::round(s * scale) / scale; }

// The row's headline: the group it is shown in.
void add_shown(nlohmann::json& row, const RankRecord& r, const std::vector<RankRecord>& ranks) {
  const GroupRecord* g = shown_group(r);
  if (!g) {
    row.update({{"state", "no_groups"}, {"group", nullptr}, {"op", nullptr}, {"seq", nullptr}, {"in_state_s", nullptr}});
    return;
  }
  const bool p2p = !g->running && g->p2p_pending > 0;
  row["state"] = g->running ? "in_op" : p2p ? "in_p2p" : "between_ops";
  row["group"] = g->ordinal;
  row["op"] = p2p ? (g->p2p_recv ? "recv<-" : "send->") + std::to_string(global_rank_of(ranks, g->group_id, g->p2p_peer))
                  : progress::op_name(g->op);
  row["seq"] = p2p ? nlohmann::json() : nlohmann::json(g->seq);
  row["in_state_s"] = rounded(p2p ? g->p2p_s : g->in_state_s, 1000);
}

std::string text_of(const nlohmann::json& v) {
  if (v.is_null()) return "-";
  if (v.is_string()) return v.get<std::string>();
  return v.dump();
}

// A row's state as the table words it: "in op", "between ops", "exited 1", "hung".
std::string state_words(const nlohmann::json& row) {
  std::string s = row.value("state", std::string("no_groups"));
  if (s == "no_groups") return "no groups";
  if (s == "exited" && row.contains("exitcode")) return "exited " + text_of(row["exitcode"]);
  std::replace(s.begin(), s.end(), '_', ' ');
  return s;
}

}  // namespace

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
                           {"in_state_s", rounded(g.in_state_s, 1000)},
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
                        {"waited_s", rounded(g.p2p_s, 1000)}};
      }
      groups.push_back(group);
    }
    nlohmann::json row = {{"rank", r->global_rank},
                          {"host", r->host},
                          {"local_rank", r->local_rank},
                          {"pid", r->pid},
                          {"restarts", r->restarts},
                          {"lag_s", rounded(detector.lag_of(r->global_rank), 1e4)},
                          {"groups_not_watched", r->overflow},
                          {"groups", groups}};
    if (!r->node.empty()) row["node"] = r->node;
    add_shown(row, *r, ranks);
    rows.push_back(std::move(row));
  }
  nlohmann::json hangs = nlohmann::json::array();
  for (const auto& h : detector.open_hangs()) {
    hangs.push_back(to_json(h));
    hangs.back()["event"] = event_name(event_of(h));
    hangs.back()["words"] = describe(h, ranks);
  }
  nlohmann::json p2p = nlohmann::json::array();
  for (const auto& w : detector.open_p2p_waits()) {
    p2p.push_back(to_json(w));
    p2p.back()["event"] = event_name(event_of(w));
    p2p.back()["words"] = describe(w, ranks);
  }
  return {{"ranks", rows}, {"hangs", hangs}, {"p2p_waits", p2p}};
}

std::string table_text(const nlohmann::json& table) {
  std::string out;
  char line[320];
  std::snprintf(line, sizeof line, "%-5s %-16s %-5s %-8s %-11s %-5s %-14s %-6s %-12s %-8s %s\n", "rank", "host",
                "local", "pid", "state", "group", "op", "seq", "time in it", "restarts", "lag/op");
  out += line;
  for (const auto& r : table.value("ranks", nlohmann::json::array())) {
    const auto& in_state = r.value("in_state_s", nlohmann::json());
    std::snprintf(line, sizeof line, "%-5d %-16s %-5d %-8d %-11s %-5s %-14s %-6s %-12s %-8d %s\n",
                  r.value("rank", -1), r.value("host", std::string()).substr(0, 16).c_str(), r.value("local_rank", 0),
                  r.value("pid", 0), state_words(r).c_str(), text_of(r.value("group", nlohmann::json())).c_str(),
                  text_of(r.value("op", nlohmann::json())).c_str(), text_of(r.value("seq", nlohmann::json())).c_str(),
                  in_state.is_number() ? human_seconds(in_state.get<double>()).c_str() : "-", r.value("restarts", 0),
                  human_seconds(r.value("lag_s", 0.0)).c_str());
    out += line;
  }
  for (const auto& h : table.value("hangs", nlohmann::json::array()))
    out += "hang: " + h.value("words", std::string()) + "\n";
  for (const auto& w : table.value("p2p_waits", nlohmann::json::array()))
    out += "p2p wait: " + w.value("words", std::string()) + "\n";
  return out;
}

}  // namespace ctrun::agent::hang
