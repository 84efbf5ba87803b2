#include "agent/hang/detector.hpp"

#include <algorithm>

namespace ctrun::agent::hang {
namespace {

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

// Where a rank waits inside a collective of a group other than `except`: the longest such wait.
const GroupRecord* blocked_elsewhere(const RankRecord& r, std::uint64_t except) {
  const GroupRecord* out = nullptr;
  for (const auto& g : r.groups) {
    if (g.group_id != except && g.running && (!out || g.in_state_s > out->in_state_s)) out = &g;
  }
  return out;
}

// An episode (a hang or a point-to-point wait) that ended: once reported, the same finding again as resolved.
template <typename Episode, typename Finding>
void resolve(const Episode& e, std::vector<Finding>& out) {
  if (!e.reported) return;
  Finding f = e.last;
  f.kind = Finding::Kind::kResolved;
  out.push_back(std::move(f));
}

// The ranks a verdict fails: everyone waits inside the op -> those they wait for; else the culprits seen that are
// not victims of another group's hang, or all seen culprits when every one of them is such a victim.
std::vector<int> ranks_to_fail(const HangFinding& f, bool all_in) {
  if (all_in) return f.waited_for;
  std::vector<int> out;
  for (const auto& c : f.culprits) {
    if (c.global_rank >= 0 && c.blocked_in_group < 0) out.push_back(c.global_rank);
  }
  if (!out.empty()) return out;
  for (const auto& c : f.culprits) {
    if (c.global_rank >= 0) out.push_back(c.global_rank);
  }
  return out;
}

}  // namespace

Findings Detector::observe(double now_s, const std::vector<RankRecord>& ranks) {
  Groups groups;
  for (const auto& r : ranks) {
    for (const auto& g : r.groups) groups[g.group_id].push_back({&r, &g});
  }
  Findings out;
  watch_p2p(ranks, out.p2p);
  watch_hangs(ranks, groups, out.hangs);
  watch_stragglers(now_s, groups, out.stragglers);
  return out;
}

// ---- point-to-point waits: per (rank, group), the oldest pending op; it ends when the rank finishes one more ----
void Detector::watch_p2p(const std::vector<RankRecord>& ranks, std::vector<P2pFinding>& out) {
  std::map<std::pair<int, std::uint64_t>, P2pEpisode> still;
  for (const auto& r : ranks) {
    for (const auto& g : r.groups) {
      const auto key = std::make_pair(r.global_rank, g.group_id);
      auto ep = p2p_.find(key);
      const bool same_op = ep != p2p_.end() && g.p2p_pending > 0 && g.p2p_done == ep->second.done;
      if (ep != p2p_.end() && !same_op) resolve(ep->second, out);
      if (g.p2p_pending == 0) continue;
      P2pEpisode e = same_op ? ep->second : P2pEpisode{.done = g.p2p_done};
      e.last = P2pFinding{.global_rank = r.global_rank,
                          .group_id = g.group_id,
                          .group_ordinal = g.ordinal,
                          .recv = g.p2p_recv,
                          .peer_group_rank = g.p2p_peer,
                          .peer = global_rank_of(ranks, g.group_id, g.p2p_peer),
                          .bytes = g.p2p_bytes,
                          .pending = g.p2p_pending,
                          .waited_s = g.p2p_s};
      if (!e.reported && e.last.waited_s >= config_.report_after_s) {
        e.reported = true;
        out.push_back(e.last);
      }
      still[key] = e;
    }
  }
  p2p_ = std::move(still);  // a (rank, group) with no record any more ends silently
}

// ---- hangs: per group, the op its furthest members are inside and who has not entered it ----
void Detector::watch_hangs(const std::vector<RankRecord>& ranks, const Groups& groups, std::vector<HangFinding>& out) {
  for (auto it = episodes_.begin(); it != episodes_.end();) {
    // A group that is gone (destroyed, or its ranks exited) ends its episode silently.
    it = groups.count(it->first) ? std::next(it) : episodes_.erase(it);
  }
  for (const auto& [id, members] : groups) watch_hang(id, members, ranks, out);
}

void Detector::watch_hang(std::uint64_t id, const std::vector<Seen>& members, const std::vector<RankRecord>& ranks,
                          std::vector<HangFinding>& out) {
  const int size = members.front().group->group_size;
  const Seen* lowest = &members.front();  // its numbering names the group ("group 0")
  const GroupRecord* front = nullptr;     // the op the furthest ranks wait in
  for (const auto& m : members) {
    if (m.rank->global_rank < lowest->rank->global_rank) lowest = &m;
    if (m.group->running && (!front || m.group->seq > front->seq)) front = m.group;
  }
  auto ep = episodes_.find(id);
  if (ep != episodes_.end() && (!front || size < 2 || ep->second.seq != front->seq)) {
    resolve(ep->second, out);  // the group went on (or nobody is inside an op any more)
    episodes_.erase(ep);
    ep = episodes_.end();
  }
  if (!front || size < 2) return;
  const std::uint64_t k = front->seq;
  HangFinding f{.group_id = id,
                .group_ordinal = lowest->group->ordinal,
                .group_size = size,
                .seq = k,
                .op = front->op,
                .dtype = front->dtype,
                .bytes = front->bytes};
  std::set<int> seen_group_ranks;
  std::set<int> waiting_peers;   // group ranks
  std::map<int, int> global_of;  // group rank -> global rank
  for (const auto& m : members) {
    seen_group_ranks.insert(m.group->group_rank);
    global_of[m.group->group_rank] = m.rank->global_rank;
    if (m.group->running && m.group->seq == k) {
      f.waiting.push_back(m.rank->global_rank);
      f.waited_s = std::max(f.waited_s, m.group->in_state_s);
      if (m.group->wait_peer >= 0) waiting_peers.insert(m.group->wait_peer);
    } else if (!m.group->entered(k)) {
      f.culprits.push_back(culprit(m, id, ranks));
    }
  }
  for (int gr = 0; gr < size; ++gr) {
    if (!seen_group_ranks.count(gr)) f.culprits.push_back(Member{.group_rank = gr});  // unseen: never failed
  }
  std::sort(f.waiting.begin(), f.waiting.end());
  const bool all_in = f.culprits.empty() && static_cast<int>(f.waiting.size()) == size;
  if (f.culprits.empty() && !all_in) {
    // Some members already finished #k (a broadcast root, say) and the rest are still in it: nobody is
    // missing; a stall shows up once they all are in the next op or the group's timeout fails the op.
    if (ep != episodes_.end()) episodes_.erase(ep);
    return;
  }
  if (all_in) {
    for (int p : waiting_peers) {
      if (auto g = global_of.find(p); g != global_of.end()) f.waited_for.push_back(g->second);
    }
  }
  if (ep == episodes_.end()) ep = episodes_.emplace(id, Episode{.seq = k}).first;
  advance(ep->second, std::move(f), all_in, out);
}

// A member that has not entered the op, and where it waits instead: inside another group's collective (a victim
// of a hang there), else in a point-to-point op pending longer than report_after_s.
Member Detector::culprit(const Seen& m, std::uint64_t group_id, const std::vector<RankRecord>& ranks) const {
  Member c{.global_rank = m.rank->global_rank, .group_rank = m.group->group_rank};
  if (const GroupRecord* b = blocked_elsewhere(*m.rank, group_id)) {
    c.blocked_in_group = b->ordinal;
    c.blocked_in_seq = b->seq;
    c.blocked_in_op = b->op;
    return c;
  }
  for (const auto& other : m.rank->groups) {
    if (other.p2p_pending == 0 || other.p2p_s < config_.report_after_s) continue;
    c.p2p_group = other.ordinal;
    c.p2p_recv = other.p2p_recv;
    c.p2p_peer = global_rank_of(ranks, other.group_id, other.p2p_peer);
  }
  return c;
}

// The episode's next step: reported once past report_after_s, a verdict once past hang_timeout_s.
void Detector::advance(Episode& e, HangFinding f, bool all_in, std::vector<HangFinding>& out) const {
  // A member named only by group rank so far (its node's summary had not arrived) is now seen: say it again,
  // with its name, and let a verdict fail it.
  const auto unseen = static_cast<int>(
      std::count_if(f.culprits.begin(), f.culprits.end(), [](const Member& m) { return m.global_rank < 0; }));
  if (unseen < e.unseen) {
    e.reported = e.verdict = false;
    e.failed.clear();
  }
  e.unseen = unseen;
  if (f.waited_s >= config_.report_after_s && !e.reported) {
    e.reported = true;
    f.kind = HangFinding::Kind::kReport;
    out.push_back(f);
  }
  if (config_.hang_timeout_s > 0 && f.waited_s >= config_.hang_timeout_s && !e.verdict) {
    e.verdict = e.reported = true;
    f.kind = HangFinding::Kind::kVerdict;
    f.to_fail = ranks_to_fail(f, all_in);
    e.failed = f.to_fail;
    out.push_back(f);
  }
  e.last = std::move(f);
  e.last.to_fail = e.failed;
}

// ---- stragglers: per complete group, each window of straggler_every_s compares the ranks' time inside ops ----
void Detector::watch_stragglers(double now_s, const Groups& groups, std::vector<StragglerFinding>& out) {
  for (auto it = windows_.begin(); it != windows_.end();) {
    it = groups.count(it->first) ? std::next(it) : windows_.erase(it);
  }
  for (const auto& [id, members] : groups) {
    const int size = members.front().group->group_size;
    if (size < 2 || static_cast<int>(members.size()) != size) continue;
    Window& w = windows_[id];
    if (w.start_s >= 0 && now_s - w.start_s < config_.straggler_every_s) continue;
    if (auto s = close_window(now_s, id, members, w)) out.push_back(*s);
  }
}

// Ends the group's window (or opens its first) at now_s; the straggler of the window that ended, if any.
std::optional<StragglerFinding> Detector::close_window(double now_s, std::uint64_t id, const std::vector<Seen>& members,
                                                       Window& w) {
  // Per-op time inside ops over the window, for ranks that were in this window from its start.
  std::vector<std::pair<int, double>> per_op;
  std::uint64_t ops = UINT64_MAX;
  for (const auto& m : members) {
    auto s = w.at_start.find(m.rank->global_rank);
    if (s == w.at_start.end() || m.group->done < s->second.first) continue;
    const std::uint64_t n = m.group->done - s->second.first;
    ops = std::min(ops, n);
    if (n > 0) per_op.emplace_back(m.rank->global_rank, (m.group->busy_s - s->second.second) / double(n));
  }
  const bool first = w.start_s < 0;
  const double window_s = now_s - w.start_s;
  w.start_s = now_s;
  w.at_start.clear();
  for (const auto& m : members) w.at_start[m.rank->global_rank] = {m.group->done, m.group->busy_s};
  if (first || per_op.size() != members.size() || ops == UINT64_MAX || ops < config_.straggler_min_ops) {
    return std::nullopt;
  }
  // Each rank's lag: the others' median time inside an op minus its own. The last to arrive waits least.
  std::map<int, double> others_median;
  for (const auto& [rank, t] : per_op) {
    std::vector<double> others;
    for (const auto& [r2, t2] : per_op) {
      if (r2 != rank) others.push_back(t2);
    }
    others_median[rank] = median(others);
    lag_[rank] = std::max(others_median[rank] - t, 0.0);  // the live table's lag: latest window, this group
  }
  const auto [last, t_last] =
      *std::min_element(per_op.begin(), per_op.end(), [](const auto& a, const auto& b) { return a.second < b.second; });
  const double lag = others_median[last] - t_last;
  if (lag < config_.straggler_min_lag_s || lag < config_.straggler_min_share * others_median[last]) {
    return std::nullopt;
  }
  auto& history = w.lags[last];
  history.push_back(lag);
  if (history.size() > 16) history.pop_front();
  return StragglerFinding{.group_id = id,
                          .group_ordinal = members.front().group->ordinal,
                          .global_rank = last,
                          .lag_s = lag,
                          .median_lag_s = median(std::vector<double>(history.begin(), history.end())),
                          .ops = ops,
                          .window_s = window_s};
}

double Detector::lag_of(int global_rank) const {
  auto it = lag_.find(global_rank);
  return it == lag_.end() ? 0 : it->second;
}

std::vector<P2pFinding> Detector::open_p2p_waits() const {
  std::vector<P2pFinding> out;
  for (const auto& [key, e] : p2p_) {
    if (e.reported) out.push_back(e.last);
  }
  return out;
}

std::vector<HangFinding> Detector::open_hangs() const {
  std::vector<HangFinding> out;
  for (const auto& [id, e] : episodes_) {
    if (e.reported) out.push_back(e.last);
  }
  return out;
}

double QuietWatch::observe(double now_s, const std::vector<QuietSample>& samples) {
  if (quiet_since_s_ < 0) quiet_since_s_ = now_s;
  const double elapsed = last_s_ < 0 ? 0 : now_s - last_s_;
  bool active = false;
  for (const auto& s : samples) {
    auto it = cpu_.find(s.global_rank);
    if (it != cpu_.end() && s.cpu_s - it->second > min_cpu_share_ * elapsed && elapsed > 0) active = true;
    if (it == cpu_.end()) active = true;  // a rank just seen (started or restarted): not quiet yet
    if (s.last_output_s >= 0 && s.last_output_s > quiet_since_s_) active = true;
    cpu_[s.global_rank] = s.cpu_s;
  }
  last_s_ = now_s;
  if (active) quiet_since_s_ = now_s;
  return now_s - quiet_since_s_;
}

}  // namespace ctrun::agent::hang
