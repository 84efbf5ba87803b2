#include "agent/hang/detector.hpp"

#include <algorithm>

namespace ctrun::agent::hang {
namespace {

struct Seen {
  const RankRecord* rank;
  const GroupRecord* group;
};

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

}  // namespace

Findings Detector::observe(double now_s, const std::vector<RankRecord>& ranks) {
  Findings out;
  std::map<std::uint64_t, std::vector<Seen>> groups;
  for (const auto& r : ranks) {
    for (const auto& g : r.groups) groups[g.group_id].push_back({&r, &g});
  }

  // ---- point-to-point waits ----
  std::map<std::pair<int, std::uint64_t>, P2pEpisode> still;
  for (const auto& r : ranks) {
    for (const auto& g : r.groups) {
      const auto key = std::make_pair(r.global_rank, g.group_id);
      auto ep = p2p_.find(key);
      const bool same_op = ep != p2p_.end() && g.p2p_pending > 0 && g.p2p_done == ep->second.done;
      if (ep != p2p_.end() && !same_op && ep->second.reported) {
        P2pFinding f = ep->second.last;
        f.kind = P2pFinding::Kind::kResolved;
        out.p2p.push_back(f);
      }
      if (g.p2p_pending == 0) continue;
      P2pEpisode e = same_op ? ep->second : P2pEpisode{.done = g.p2p_done};
      P2pFinding f;
      f.global_rank = r.global_rank;
      f.group_id = g.group_id;
      f.group_ordinal = g.ordinal;
      f.recv = g.p2p_recv;
      f.peer_group_rank = g.p2p_peer;
      f.peer = global_rank_of(ranks, g.group_id, g.p2p_peer);
      f.bytes = g.p2p_bytes;
      f.pending = g.p2p_pending;
      f.waited_s = g.p2p_s;
      if (!e.reported && f.waited_s >= config_.report_after_s) {
        e.reported = true;
        out.p2p.push_back(f);
      }
      e.last = f;
      still[key] = e;
    }
  }
  p2p_ = std::move(still);

  // ---- hangs ----
  for (auto it = episodes_.begin(); it != episodes_.end();) {
    // A group that is gone (destroyed, or its ranks exited) ends its episode silently.
    it = groups.count(it->first) ? std::next(it) : episodes_.erase(it);
  }
  for (const auto& [id, members] : groups) {
    const int size = members.front().group->group_size;
    int ordinal = members.front().group->ordinal;
    int lowest = members.front().rank->global_rank;
    for (const auto& m : members) {
      if (m.rank->global_rank < lowest) {
        lowest = m.rank->global_rank;
        ordinal = m.group->ordinal;
      }
    }
    // The op the furthest ranks wait in.
    const GroupRecord* front = nullptr;
    for (const auto& m : members) {
      if (m.group->running && (!front || m.group->seq > front->seq)) front = m.group;
    }
    auto ep = episodes_.find(id);
    if (!front || size < 2) {
      if (ep != episodes_.end()) {
        if (ep->second.reported) {
          HangFinding f = ep->second.last;
          f.kind = HangFinding::Kind::kResolved;
          out.hangs.push_back(f);
        }
        episodes_.erase(ep);
      }
      continue;
    }
    const std::uint64_t k = front->seq;
    if (ep != episodes_.end() && ep->second.seq != k) {
      if (ep->second.reported) {
        HangFinding f = ep->second.last;
        f.kind = HangFinding::Kind::kResolved;
        out.hangs.push_back(f);
      }
      episodes_.erase(ep);
      ep = episodes_.end();
    }
    HangFinding f;
    f.group_id = id;
    f.group_ordinal = ordinal;
    f.group_size = size;
    f.seq = k;
    f.op = front->op;
    f.dtype = front->dtype;
    f.bytes = front->bytes;
    std::set<int> seen_group_ranks;
    std::vector<int> waiting_peers;  // group ranks
    std::map<int, int> global_of;    // group rank -> global rank
    for (const auto& m : members) {
      seen_group_ranks.insert(m.group->group_rank);
      global_of[m.group->group_rank] = m.rank->global_rank;
      if (m.group->running && m.group->seq == k) {
        f.waiting.push_back(m.rank->global_rank);
        f.waited_s = std::max(f.waited_s, m.group->in_state_s);
        if (m.group->wait_peer >= 0) waiting_peers.push_back(m.group->wait_peer);
      } else if (!m.group->entered(k)) {
        Member c;
        c.global_rank = m.rank->global_rank;
        c.group_rank = m.group->group_rank;
        if (const GroupRecord* b = blocked_elsewhere(*m.rank, id)) {
          c.blocked_in_group = b->ordinal;
          c.blocked_in_seq = b->seq;
          c.blocked_in_op = b->op;
        } else {
          for (const auto& other : m.rank->groups) {
            if (other.p2p_pending == 0 || other.p2p_s < config_.report_after_s) continue;
            c.p2p_group = other.ordinal;
            c.p2p_recv = other.p2p_recv;
            c.p2p_peer = global_rank_of(ranks, other.group_id, other.p2p_peer);
          }
        }
        f.culprits.push_back(c);
      }
    }
    for (int gr = 0; gr < size; ++gr) {
      if (seen_group_ranks.count(gr)) continue;
      Member c;
      c.group_rank = gr;
      f.culprits.push_back(c);  // unseen: named by group rank only, never failed
    }
    std::sort(f.waiting.begin(), f.waiting.end());
    const bool all_in = f.culprits.empty() && static_cast<int>(f.waiting.size()) == size;
    if (f.culprits.empty() && !all_in) {
      // Some members already finished #k (a broadcast root, say) and the rest are still in it: nobody is
      // missing; a stall shows up once they all are in the next op or the group's timeout fails the op.
      if (ep != episodes_.end()) episodes_.erase(ep);
      continue;
    }
    if (all_in) {
      std::set<int> peers(waiting_peers.begin(), waiting_peers.end());
      for (int p : peers) {
        auto g = global_of.find(p);
        if (g != global_of.end()) f.waited_for.push_back(g->second);
      }
    }
    if (ep == episodes_.end()) ep = episodes_.emplace(id, Episode{.seq = k}).first;
    Episode& e = ep->second;
    e.waited_s = f.waited_s;
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
      out.hangs.push_back(f);
    }
    if (config_.hang_timeout_s > 0 && f.waited_s >= config_.hang_timeout_s && !e.verdict) {
      e.verdict = true;
      e.reported = true;
      f.kind = HangFinding::Kind::kVerdict;
      for (const auto& c : f.culprits) {
        if (c.global_rank >= 0 && c.blocked_in_group < 0) f.to_fail.push_back(c.global_rank);
      }
      if (f.to_fail.empty()) {
        for (const auto& c : f.culprits) {
          if (c.global_rank >= 0) f.to_fail.push_back(c.global_rank);
        }
      }
      if (all_in) f.to_fail = f.waited_for;
      e.failed = f.to_fail;
      out.hangs.push_back(f);
    }
    e.last = f;
    e.last.to_fail = e.failed;
  }

  // ---- stragglers ----
  for (auto it = windows_.begin(); it != windows_.end();) {
    it = groups.count(it->first) ? std::next(it) : windows_.erase(it);
  }
  for (const auto& [id, members] : groups) {
    const int size = members.front().group->group_size;
    if (size < 2 || static_cast<int>(members.size()) != size) continue;
    Window& w = windows_[id];
    if (w.start_s < 0) {
      w.start_s = now_s;
      for (const auto& m : members) w.at_start[m.rank->global_rank] = {m.group->done, m.group->busy_s};
      continue;
    }
    if (now_s - w.start_s < config_.straggler_every_s) continue;
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
    const double window_s = now_s - w.start_s;
    w.start_s = now_s;
    w.at_start.clear();
    for (const auto& m : members) w.at_start[m.rank->global_rank] = {m.group->done, m.group->busy_s};
    if (static_cast<int>(per_op.size()) != size || ops == UINT64_MAX || ops < config_.straggler_min_ops) continue;
    std::vector<double> all;
    for (const auto& [rank, t] : per_op) all.push_back(t);
    for (const auto& [rank, t] : per_op) {
      std::vector<double> others;
      for (const auto& [r2, t2] : per_op) {
        if (r2 != rank) others.push_back(t2);
      }
      const double lag = median(others) - t;
      lag_[rank] = std::max(lag, 0.0);  // the live table's lag: latest window, this group
    }
    const auto last = std::min_element(per_op.begin(), per_op.end(),
                                       [](const auto& a, const auto& b) { return a.second < b.second; });
    std::vector<double> others;
    for (const auto& [rank, t] : per_op) {
      if (rank != last->first) others.push_back(t);
    }
    const double others_median = median(others);
    const double lag = others_median - last->second;
    if (lag < config_.straggler_min_lag_s || lag < config_.straggler_min_share * others_median) continue;
    auto& history = w.lags[last->first];
    history.push_back(lag);
    if (history.size() > 16) history.pop_front();
    StragglerFinding s;
    s.group_id = id;
    s.group_ordinal = members.front().group->ordinal;
    s.global_rank = last->first;
    s.lag_s = lag;
    s.median_lag_s = median(std::vector<double>(history.begin(), history.end()));
    s.ops = ops;
    s.window_s = window_s;
    out.stragglers.push_back(s);
  }
  return out;
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
