#include "agent/hang/region.hpp"

#include "agent/base/stale_files.hpp"

#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <optional>

namespace ctrun::agent::hang {
namespace {

double seconds(std::int64_t ns) { return static_cast<double>(ns) / 1e9; }

// Each part of a slot is copied under its own seqlock (progress::read_consistent); nullopt: torn or unused.
struct Identity {
  std::uint64_t group_id;
  int global_rank, group_rank, group_size, ordinal;
};
std::optional<Identity> read_identity(const progress::Slot& s) {
  return progress::read_consistent(s.identity, [](const progress::Identity& i) {
    return Identity{i.group_id.load(std::memory_order_relaxed), i.global_rank.load(std::memory_order_relaxed),
                    i.group_rank.load(std::memory_order_relaxed), i.group_size.load(std::memory_order_relaxed),
                    i.ordinal.load(std::memory_order_relaxed)};
  });
}

struct RunCopy {
  std::uint32_t state, op, dtype, wait_step;
  std::uint64_t seq, bytes, done, failed, busy_ns;
  std::int64_t since_ns;
  int wait_peer;
};
std::optional<RunCopy> read_run(const progress::Slot& s) {
  return progress::read_consistent(s.run, [](const progress::Run& r) {
    return RunCopy{r.state.load(std::memory_order_relaxed),    r.op.load(std::memory_order_relaxed),
                   r.dtype.load(std::memory_order_relaxed),    r.wait_step.load(std::memory_order_relaxed),
                   r.seq.load(std::memory_order_relaxed),      r.bytes.load(std::memory_order_relaxed),
                   r.done.load(std::memory_order_relaxed),     r.failed.load(std::memory_order_relaxed),
                   r.busy_ns.load(std::memory_order_relaxed),  r.since_ns.load(std::memory_order_relaxed),
                   r.wait_peer.load(std::memory_order_relaxed)};
  });
}

struct P2pCopy {
  std::uint32_t pending, kind;
  std::int32_t peer;
  std::uint64_t bytes;
  std::int64_t since_ns;
  std::uint64_t completed;
};
std::optional<P2pCopy> read_p2p(const progress::Slot& s) {
  return progress::read_consistent(s.p2p, [](const progress::P2p& p) {
    return P2pCopy{p.pending.load(std::memory_order_relaxed),  p.kind.load(std::memory_order_relaxed),
                   p.peer.load(std::memory_order_relaxed),     p.bytes.load(std::memory_order_relaxed),
                   p.since_ns.load(std::memory_order_relaxed), p.completed.load(std::memory_order_relaxed)};
  });
}

// One group's record from its slot, ages as of `now` (ns); the rank's global rank is taken from the first group
// that has one. nullopt: unused, or a part caught mid-write.
std::optional<GroupRecord> read_slot(const progress::Slot& s, std::int64_t now, int& global_rank) {
  const auto id = read_identity(s);
  if (!id || id->group_id == 0) return std::nullopt;
  if (global_rank < 0) global_rank = id->global_rank;
  const auto issue = progress::read_consistent(
      s.issue, [](const progress::Issue& i) { return i.issued.load(std::memory_order_relaxed); });
  const auto run = read_run(s);
  const auto p2p = read_p2p(s);
  if (!issue || !run) return std::nullopt;
  GroupRecord g;
  g.group_id = id->group_id;
  g.group_rank = id->group_rank;
  g.group_size = id->group_size;
  g.ordinal = id->ordinal;
  if (p2p && p2p->pending > 0) {
    g.p2p_pending = p2p->pending;
    g.p2p_recv = p2p->kind == static_cast<std::uint32_t>(progress::P2pKind::kRecv);
    g.p2p_peer = p2p->peer;
    g.p2p_bytes = p2p->bytes;
    g.p2p_s = seconds(std::max<std::int64_t>(0, now - p2p->since_ns));
  }
  if (p2p) g.p2p_done = p2p->completed;
  g.issued = *issue;
  g.running = run->state == static_cast<std::uint32_t>(progress::RunState::kRunning);
  g.seq = run->seq;
  g.op = run->op;
  g.dtype = run->dtype;
  g.bytes = run->bytes;
  g.in_state_s = seconds(std::max<std::int64_t>(0, now - run->since_ns));
  g.wait_peer = run->wait_peer;
  g.wait_step = run->wait_step;
  g.done = run->done;
  g.failed = run->failed;
  g.busy_s = seconds(static_cast<std::int64_t>(run->busy_ns));
  // A reader may catch the issue part before the run part of the same op: the op running was issued.
  if (g.running && g.issued <= g.seq) g.issued = g.seq + 1;
  return g;
}

}  // namespace

Region::Region(int agent_pid, int attempt, int local_ranks, const std::string& dir)
    : path_(dir + "/" + progress::kRegionPrefix + std::to_string(agent_pid) + "-" + std::to_string(attempt)),
      header_(progress::create_region(path_, local_ranks, agent_pid, attempt)),
      local_ranks_(local_ranks) {}

Region::~Region() {
  progress::unmap_region(header_);
  ::unlink(path_.c_str());
}

RankRecord Region::read(int local_rank) const {
  RankRecord out;
  out.local_rank = local_rank;
  if (local_rank < 0 || local_rank >= local_ranks_) return out;
  const progress::Row* row = progress::row_of(header_, local_rank);
  out.pid = row->header.pid.load(std::memory_order_relaxed);
  out.overflow = row->header.overflow.load(std::memory_order_relaxed);
  out.retired_done = row->header.retired_done.load(std::memory_order_acquire);
  const std::int64_t now = progress::now_ns();
  for (const progress::Slot& s : row->slots) {
    if (s.identity.pid.load(std::memory_order_acquire) == 0) continue;
    if (auto g = read_slot(s, now, out.global_rank)) out.groups.push_back(*g);
  }
  return out;
}

std::vector<std::string> sweep_stale_regions(const std::string& dir) {
  return sweep_files_of_dead_agents(dir, progress::kRegionPrefix);
}

}  // namespace ctrun::agent::hang
