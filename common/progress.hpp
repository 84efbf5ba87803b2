#pragma once
// Progress records: where every local rank is in its collectives, in memory the local agent can read while the
// job runs (so hangs and stragglers are found and named: docs/hang.md). The agent creates one region per attempt (a file
// under /dev/shm whose name carries the agent's pid and the attempt, see region_path) and names it in every
// worker's environment (worker_env::kProgressFile). comm maps it once per process and, per op, writes a few
// plain stores into the slot of (this local rank, this group): no syscall, lock or allocation per op.
//
// Layout (version kVersion; a reader refuses any other magic/version):
//   RegionHeader | Row[local_ranks]; a Row is RowHeader + kMaxGroups Slots, each Slot a few cache lines.
// A process claims a free slot of its row per group it creates (claim_slot) and frees it when the group goes.
// Past kMaxGroups live groups a group gets no slot: its ops are not recorded, RowHeader::overflow counts such
// groups, and the agent says "groups past 32 are not watched" rather than guessing.
//
// Every part of a slot has exactly one writer thread and its own sequence counter (seqlock): odd while being
// written. A reader copies the part and retries when the counter moved or was odd, so it gets a consistent
// snapshot without ever blocking the writer.
//   identity: written at claim/release by the thread creating the group;
//   issue:    written when an op is issued (the caller's thread, under the backend's queue lock);
//   run:      written when the backend's worker thread starts an op, waits for a peer, and finishes it;
//   p2p:      written by that same worker thread when its pending point-to-point ops change: how many, and the
//             oldest one (send or recv, peer, bytes, since when). Point-to-point ops are not numbered collectives:
//             the agent shows them and reports a long wait in one, never counts them into collective hangs.
// Times are CLOCK_MONOTONIC nanoseconds (vDSO, no syscall): readers on this host turn them into durations; only
// durations leave the node (hosts' clocks differ).

#include <time.h>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <iterator>
#include <optional>
#include <string>

namespace ctrun::progress {

inline constexpr std::uint32_t kMagic = 0x52505443;  // "CTPR" little-endian
inline constexpr std::uint32_t kVersion = 2;         // 2: the p2p part
inline constexpr int kMaxGroups = 32;                // slots per local rank (Megatron-style jobs create ~10-20 groups)
inline constexpr int kMaxLocalRanks = 4096;

// What the run part says the rank is doing in the group.
enum class RunState : std::uint32_t {
  kIdle = 0,     // no op of this group running (all issued ops done, or none issued)
  kRunning = 1,  // inside op `seq` since `since_ns`
};

// Values of Run::outcome for the last finished op.
enum class Outcome : std::uint32_t { kNone = 0, kOk = 1, kFailed = 2 };

// The numbers comm writes for ops and dtypes: its OpKind and DataType (tests/comm/tables_test.cpp checks that
// they agree), named here so that the agent can print them without depending on comm.
inline constexpr const char* kOpNames[] = {"send",   "broadcast", "all_reduce",     "reduce",     "all_gather",
                                           "gather", "scatter",   "reduce_scatter", "all_to_all", "barrier"};
inline constexpr const char* kDtypeNames[] = {"float32", "float64", "float16", "bfloat16",
                                              "int8",    "uint8",   "int32",   "int64"};
inline std::string op_name(std::uint32_t op) {
  return op < std::size(kOpNames) ? kOpNames[op] : "op" + std::to_string(op);
}
inline std::string dtype_name(std::uint32_t dtype) {
  return dtype < std::size(kDtypeNames) ? kDtypeNames[dtype] : "dtype" + std::to_string(dtype);
}

inline std::int64_t now_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<std::int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

using U32 = std::atomic<std::uint32_t>;
using I32 = std::atomic<std::int32_t>;
using U64 = std::atomic<std::uint64_t>;
using I64 = std::atomic<std::int64_t>;

struct alignas(64) Identity {
  U32 version;      // seqlock
  I32 pid;          // the writing process
  U64 group_id;     // agreed by the group's members at creation; 0: the slot is free
  I32 global_rank;  // RANK of the writer (-1 unknown)
  I32 group_rank;
  I32 group_size;
  I32 ordinal;  // this process's n-th group (0: the first, usually the world group)
};

struct alignas(64) Issue {
  U32 version;
  U32 op;      // op kind of the last issued op (comm's OpKind number; names: kOpNames)
  U64 issued;  // collectives issued so far: the last issued one is #issued-1 (comm's per-group counter)
  U64 bytes;
  U32 dtype;
};

struct alignas(64) Run {
  U32 version;
  U32 state;  // RunState
  U64 seq;    // the op running, or the last one run
  U32 op;
  U32 dtype;
  U64 bytes;
  I64 since_ns;   // entered `state`
  I32 wait_peer;  // group rank the op waits for now (-1: none / not known)
  U32 wait_step;  // how many waits this op has gone through (the algorithm's step, roughly)
  U64 done;       // ops finished (ok or failed)
  U64 failed;     // of which failed
  U64 busy_ns;    // total time inside ops: a rank that arrives last waits least (straggler lag, summary.hpp)
  U32 outcome;    // Outcome of the last finished op
};

// Values of P2p::kind for the oldest pending point-to-point op.
enum class P2pKind : std::uint32_t { kSend = 0, kRecv = 1 };

struct alignas(64) P2p {
  U32 version;
  U32 pending;    // point-to-point ops posted and not finished (0: the fields below are stale)
  U32 kind;       // P2pKind of the oldest pending one
  I32 peer;       // its peer's group rank
  U64 bytes;      // its size
  I64 since_ns;   // when it was posted
  U64 completed;  // point-to-point ops finished so far
};

struct Slot {
  Identity identity;
  Issue issue;
  Run run;
  P2p p2p;
};

struct alignas(64) RowHeader {
  I32 pid;       // the last process that claimed a slot in this row
  U32 overflow;  // groups this rank created while all kMaxGroups slots were taken (not recorded)
  U32 groups;    // groups this rank created (claims), for the ordinal
  // The most ops one freed slot of this row had finished. A group's slot goes with the group (a worker that exits
  // cleanly frees them all), often before the agent's next read; this keeps what it did for the agent's count of
  // progress (--stop-without-progress). Written under the claim lock, by the row's one process.
  U64 retired_done;
};

struct Row {
  RowHeader header;
  Slot slots[kMaxGroups];
};

struct alignas(64) RegionHeader {
  std::uint32_t magic;
  std::uint32_t version;
  std::uint32_t header_bytes;  // sizeof(RegionHeader): readers check the layout they were built with
  std::uint32_t row_bytes;     // sizeof(Row)
  std::uint32_t local_ranks;
  std::uint32_t max_groups;
  std::int32_t agent_pid;
  std::uint32_t attempt;
  std::int64_t created_ns;
};

inline std::size_t region_bytes(int local_ranks) {
  return sizeof(RegionHeader) + sizeof(Row) * static_cast<std::size_t>(local_ranks);
}
inline Row* row_of(RegionHeader* h, int local_rank) {
  return reinterpret_cast<Row*>(reinterpret_cast<char*>(h) + sizeof(RegionHeader)) + local_rank;
}
inline const Row* row_of(const RegionHeader* h, int local_rank) {
  return reinterpret_cast<const Row*>(reinterpret_cast<const char*>(h) + sizeof(RegionHeader)) + local_rank;
}

// "/dev/shm/ctrun-progress-<agent pid>-<attempt>": the pid lets the next ctrun remove regions a kill -9 left.
std::string region_path(int agent_pid, int attempt);
inline constexpr const char* kRegionPrefix = "ctrun-progress-";

// Seqlock helpers. The writer (one thread per part): begin, relaxed stores, end. The reader: read_consistent.
template <class Part>
inline void begin_write(Part& p) {
  p.version.store(p.version.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_release);
}
template <class Part>
inline void end_write(Part& p) {
  p.version.store(p.version.load(std::memory_order_relaxed) + 1, std::memory_order_release);
}

// Copies a part into plain values with `copy(part)` until the copy is consistent (at most `tries` attempts: a
// writer that died mid-write leaves the counter odd; the caller then gets nullopt and treats the part as unknown).
template <class Part, class Copy>
inline auto read_consistent(const Part& p, Copy copy, int tries = 64) -> std::optional<decltype(copy(p))> {
  for (int i = 0; i < tries; ++i) {
    const std::uint32_t v1 = p.version.load(std::memory_order_acquire);
    if (v1 & 1u) continue;
    auto out = copy(p);
    std::atomic_thread_fence(std::memory_order_acquire);
    if (p.version.load(std::memory_order_relaxed) == v1) return out;
  }
  return std::nullopt;
}

// The writer side comm holds per group: null slot = records off (no region, setting off, or no free slot).
class SlotWriter {
 public:
  SlotWriter() = default;
  explicit SlotWriter(Slot* slot) : slot_(slot) {}
  bool enabled() const { return slot_ != nullptr; }

  // Op #seq of the group was issued (the caller's thread).
  void issued(std::uint64_t seq, std::uint32_t op, std::uint32_t dtype, std::uint64_t bytes) {
    if (!slot_) return;
    Issue& i = slot_->issue;
    begin_write(i);
    i.op.store(op, std::memory_order_relaxed);
    i.issued.store(seq + 1, std::memory_order_relaxed);
    i.bytes.store(bytes, std::memory_order_relaxed);
    i.dtype.store(dtype, std::memory_order_relaxed);
    end_write(i);
  }

  // The backend's worker starts op #seq.
  void running(std::uint64_t seq, std::uint32_t op, std::uint32_t dtype, std::uint64_t bytes) {
    if (!slot_) return;
    Run& r = slot_->run;
    started_ns_ = now_ns();
    begin_write(r);
    r.state.store(static_cast<std::uint32_t>(RunState::kRunning), std::memory_order_relaxed);
    r.seq.store(seq, std::memory_order_relaxed);
    r.op.store(op, std::memory_order_relaxed);
    r.dtype.store(dtype, std::memory_order_relaxed);
    r.bytes.store(bytes, std::memory_order_relaxed);
    r.since_ns.store(started_ns_, std::memory_order_relaxed);
    r.wait_peer.store(-1, std::memory_order_relaxed);
    r.wait_step.store(0, std::memory_order_relaxed);
    end_write(r);
  }

  // The running op is about to block waiting for group rank `peer` (-1: several / unknown). Called only before
  // a wait that may sleep, so the fast path of an op that never waits does not pay for it.
  void waiting(int peer) {
    if (!slot_) return;
    Run& r = slot_->run;
    begin_write(r);
    r.wait_peer.store(peer, std::memory_order_relaxed);
    r.wait_step.store(r.wait_step.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
    end_write(r);
  }

  // The running op finished.
  void finished(bool ok) {
    if (!slot_) return;
    Run& r = slot_->run;
    const std::int64_t t = now_ns();
    begin_write(r);
    r.state.store(static_cast<std::uint32_t>(RunState::kIdle), std::memory_order_relaxed);
    r.since_ns.store(t, std::memory_order_relaxed);
    r.wait_peer.store(-1, std::memory_order_relaxed);
    r.done.store(r.done.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
    if (!ok) r.failed.store(r.failed.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
    r.busy_ns.store(r.busy_ns.load(std::memory_order_relaxed) + static_cast<std::uint64_t>(t - started_ns_),
                    std::memory_order_relaxed);
    r.outcome.store(static_cast<std::uint32_t>(ok ? Outcome::kOk : Outcome::kFailed), std::memory_order_relaxed);
    end_write(r);
  }

  // The worker's pending point-to-point ops now: `pending` of them, the oldest posted at `since_ns`; `completed`
  // so far. Writes only when something changed, so a loop may call it on every turn.
  void p2p(std::uint32_t pending, P2pKind kind, int peer, std::uint64_t bytes, std::int64_t since_ns,
           std::uint64_t completed) {
    if (!slot_) return;
    if (pending == p2p_pending_ && (pending == 0 || since_ns == p2p_since_) && completed == p2p_completed_) return;
    p2p_pending_ = pending;
    p2p_since_ = since_ns;
    p2p_completed_ = completed;
    P2p& p = slot_->p2p;
    begin_write(p);
    p.pending.store(pending, std::memory_order_relaxed);
    p.kind.store(static_cast<std::uint32_t>(kind), std::memory_order_relaxed);
    p.peer.store(peer, std::memory_order_relaxed);
    p.bytes.store(bytes, std::memory_order_relaxed);
    p.since_ns.store(since_ns, std::memory_order_relaxed);
    p.completed.store(completed, std::memory_order_relaxed);
    end_write(p);
  }

  Slot* slot() const { return slot_; }

 private:
  Slot* slot_ = nullptr;
  std::int64_t started_ns_ = 0;  // the worker thread's own copy (only it writes the run part)
  // What the p2p part says now (the worker thread's own copy: only it writes that part).
  std::uint32_t p2p_pending_ = 0;
  std::int64_t p2p_since_ = 0;
  std::uint64_t p2p_completed_ = 0;
};

// ---- the agent side: making one ----

// Creates the region file at `path` (replacing a leftover of that name), sized and headed for `local_ranks`
// rows, and maps it. Throws std::runtime_error naming the path and the errno text.
RegionHeader* create_region(const std::string& path, int local_ranks, int agent_pid, int attempt);
void unmap_region(RegionHeader* header);

// ---- the worker side: the region named in this process's environment ----

// Maps the region named by worker_env::kProgressFile for this process's LOCAL_RANK, once per process (later
// calls return the same). Null when unset, unreadable, of another version, or LOCAL_RANK is out of its range:
// then nothing is recorded (a warning says why, once).
RegionHeader* attached_region();

// Claims a free slot of this process's row for a group (null writer when there is no region or no free slot,
// counting the overflow). `group_id` must be non-zero and the same on every member of the group.
SlotWriter claim_slot(std::uint64_t group_id, int group_rank, int group_size);
// Frees the slot (the group was destroyed), so a later group can reuse it.
void release_slot(SlotWriter& writer);

}  // namespace ctrun::progress
