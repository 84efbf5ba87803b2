#include "agent/hang/summary.hpp"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "common/text.hpp"

namespace ctrun::agent::hang {
namespace {

long long ms(double s) { return std::llround(s * 1000); }

std::string rank_line(const RankRecord& r) {
  return "r " + std::to_string(r.global_rank) + " " + std::to_string(r.local_rank) + " " + std::to_string(r.pid) + " " +
         std::to_string(r.overflow) + "\n";
}

std::string group_line(const GroupRecord& g) {
  std::ostringstream o;
  o << "g " << g.group_id << ' ' << g.group_rank << ' ' << g.group_size << ' ' << g.ordinal << ' ' << g.issued << ' '
    << (g.running ? 1 : 0) << ' ' << g.seq << ' ' << g.op << ' ' << g.dtype << ' ' << g.bytes << ' ' << ms(g.in_state_s)
    << ' ' << g.wait_peer << ' ' << g.wait_step << ' ' << g.done << ' ' << g.failed << ' ' << ms(g.busy_s) << ' '
    << g.p2p_pending << ' ' << (g.p2p_recv ? 1 : 0) << ' ' << g.p2p_peer << ' ' << g.p2p_bytes << ' ' << ms(g.p2p_s)
    << ' ' << g.p2p_done << '\n';
  return o.str();
}

}  // namespace

std::string encode(const Verdicts& v) {
  if (v.ranks.empty()) return {};
  std::string out;
  for (int r : v.ranks) out += std::to_string(r) + " ";
  out += "\n";
  for (const auto& note : v.notes) out += note + "\n";
  return out;
}

std::optional<Verdicts> decode_verdicts(const std::string& text) {
  const auto lines = text::split(text, '\n');
  if (lines.size() < 2) return std::nullopt;  // no line end: nothing published
  Verdicts v;
  std::istringstream ranks(lines[0]);
  for (int g = 0; ranks >> g;) v.ranks.push_back(g);
  for (std::size_t i = 1; i < lines.size(); ++i) {
    if (!lines[i].empty()) v.notes.push_back(lines[i]);
  }
  if (v.ranks.empty()) return std::nullopt;
  return v;
}

std::string encode(const NodeSummary& s, std::size_t max_bytes) {
  // The host name goes last on its line: it is the only field that could hold a space.
  const std::string head = "P1 " + std::to_string(s.counter) + " " + std::to_string(s.restarts) + " " + s.host + "\n";
  // Running groups first (what a hang report needs), then idle ones, each rank's lines kept together.
  std::vector<std::string> ranks, running, idle;
  std::size_t running_bytes = 0;
  for (const auto& r : s.ranks) {
    std::string busy, rest;
    for (const auto& g : r.groups) (g.running ? busy : rest) += group_line(g);
    ranks.push_back(rank_line(r));
    running.push_back(busy);
    idle.push_back(rest);
    running_bytes += busy.size();
  }
  std::uint64_t cut = s.cut;
  std::string out = head;
  const std::size_t reserve = 32;  // the `t` line
  for (std::size_t i = 0; i < ranks.size(); ++i) {
    if (out.size() + ranks[i].size() + running[i].size() + reserve > max_bytes) {
      cut += 1;
      continue;
    }
    out += ranks[i] + running[i];
    // Idle groups only while the running ones of every later rank still fit.
    running_bytes -= running[i].size();
    if (out.size() + idle[i].size() + running_bytes + reserve <= max_bytes) {
      out += idle[i];
    } else {
      cut += static_cast<std::uint64_t>(std::count(idle[i].begin(), idle[i].end(), '\n'));
    }
  }
  if (cut) out += "t " + std::to_string(cut) + "\n";
  return out;
}

std::optional<NodeSummary> decode(const std::string& text) {
  std::istringstream in(text);
  std::string line;
  NodeSummary s;
  if (!std::getline(in, line) || !line.starts_with("P1 ")) return std::nullopt;
  {
    std::istringstream h(line.substr(3));
    if (!(h >> s.counter >> s.restarts)) return std::nullopt;
    h.get();
    std::getline(h, s.host);
  }
  while (std::getline(in, line)) {
    std::istringstream l(line);
    std::string tag;
    l >> tag;
    if (tag == "r") {
      RankRecord r;
      if (!(l >> r.global_rank >> r.local_rank >> r.pid >> r.overflow)) return std::nullopt;
      r.host = s.host;
      r.restarts = s.restarts;
      s.ranks.push_back(r);
    } else if (tag == "g") {
      if (s.ranks.empty()) return std::nullopt;
      GroupRecord g;
      int running = 0;
      long long in_state_ms = 0, busy_ms = 0;
      if (!(l >> g.group_id >> g.group_rank >> g.group_size >> g.ordinal >> g.issued >> running >> g.seq >> g.op >>
            g.dtype >> g.bytes >> in_state_ms >> g.wait_peer >> g.wait_step >> g.done >> g.failed >> busy_ms)) {
        return std::nullopt;
      }
      // The p2p fields came later: a line without them (an older agent's) leaves them at their defaults.
      int recv = 0;
      long long p2p_ms = 0;
      if (l >> g.p2p_pending) {
        if (!(l >> recv >> g.p2p_peer >> g.p2p_bytes >> p2p_ms >> g.p2p_done)) return std::nullopt;
        g.p2p_recv = recv != 0;
        g.p2p_s = static_cast<double>(p2p_ms) / 1000;
      }
      g.running = running != 0;
      g.in_state_s = static_cast<double>(in_state_ms) / 1000;
      g.busy_s = static_cast<double>(busy_ms) / 1000;
      s.ranks.back().groups.push_back(g);
    } else if (tag == "t") {
      if (!(l >> s.cut)) return std::nullopt;
    } else if (!tag.empty()) {
      return std::nullopt;
    }
  }
  return s;
}

std::string content_of(NodeSummary s) {
  s.counter = 0;
  for (auto& r : s.ranks) {
    for (auto& g : r.groups) {
      g.in_state_s = 0;
      g.busy_s = 0;  // follows done, which is compared
      g.p2p_s = 0;
    }
  }
  return encode(s);
}

bool PublishPacer::due(double now_s, int nodes, const std::string& content, bool stalled) {
  if (last_s_ < 0) return true;
  const double interval =
      stalled ? min_interval_s
              : std::max(min_interval_s, static_cast<double>(std::max(nodes, 1)) / max_writes_per_s);
  if (now_s - last_s_ < interval) return false;
  return content != last_content_ || now_s - last_s_ >= heartbeat_s;
}

bool stalled(const std::vector<RankRecord>& ranks, double after_s) {
  for (const auto& r : ranks) {
    if (r.groups.empty()) continue;
    double freshest = -1;
    for (const auto& g : r.groups) {
      if (g.issued == 0 && g.p2p_done == 0 && g.p2p_pending == 0) continue;  // never used: says nothing
      const double since = std::min(g.in_state_s, g.p2p_pending > 0 ? g.p2p_s : g.in_state_s);
      freshest = freshest < 0 ? since : std::min(freshest, since);
    }
    if (freshest > after_s) return true;
  }
  return false;
}

void PublishPacer::published(double now_s, const std::string& content) {
  last_s_ = now_s;
  last_content_ = content;
}

void RemoteView::update(const std::string& node, const NodeSummary& summary, double now_s) {
  auto it = nodes_.find(node);
  if (it != nodes_.end() && summary.counter <= it->second.summary.counter &&
      summary.restarts == it->second.summary.restarts) {
    return;
  }
  nodes_[node] = Held{summary, now_s};
}

void RemoteView::forget(const std::string& node) { nodes_.erase(node); }

std::vector<RankRecord> RemoteView::ranks(double now_s) const {
  std::vector<RankRecord> out;
  for (const auto& [node, held] : nodes_) {
    const double age = std::max(0.0, now_s - held.fetched_s);
    for (RankRecord r : held.summary.ranks) {
      r.node = node;
      for (auto& g : r.groups) {
        g.in_state_s += age;
        if (g.p2p_pending > 0) g.p2p_s += age;
      }
      out.push_back(std::move(r));
    }
  }
  return out;
}

}  // namespace ctrun::agent::hang
