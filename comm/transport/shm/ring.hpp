#pragma once
// The shared-memory layout of the shm transport: a segment header with the owner's doorbell, then one SPSC byte
// ring per sender. Positions are free-running 64-bit byte counts, so full/empty never need a spare slot.

#include <atomic>
#include <cstddef>
#include <cstdint>

namespace ctrun::comm::transport::shm {

inline constexpr std::uint64_t kSegmentMagic = 0x324d4d4f43544300ull;  // "\0CTCOMM2"
inline constexpr int kProgressCounters = 3;  // SharedWorkspace::kCounters
inline constexpr int kMaxSlots = 64;         // SharedWorkspace::kMaxSlots

struct alignas(64) SegmentHeader {
  std::uint64_t magic;
  std::uint64_t ring_bytes;
  std::int32_t pid;
  std::int32_t size;
  std::uint64_t self_address;  // where the owner mapped this segment: peers probe process_vm_readv with it
  std::uint32_t peer_reads_ok;  // the owner could read every peer's memory (process_vm_readv) at creation
  std::uint64_t start_time;     // the owner's start time (/proc/PID/stat), so peers' pidfds are checked against it
  alignas(64) std::atomic<std::uint32_t> doorbell;  // bumped on every event for the owner; futex word
  std::atomic<std::uint32_t> sleepers;              // owner is (about to be) in futex_wait
  alignas(64) std::atomic<std::uint32_t> aborted;   // set by any rank that aborts the group
  std::atomic<std::int32_t> aborted_by;
  char abort_reason[512];
  alignas(64) std::atomic<std::uint64_t> barrier_arrivals;  // how many workspace barriers the owner entered
  // The op signature of barrier g is in slot g % 2: a peer can be at most one barrier ahead.
  std::atomic<std::uint64_t> barrier_signature[2];
  // Pipelined workspace use (SharedWorkspace::Counter): the owner's progress counters, each on its own line.
  struct alignas(64) Progress {
    std::atomic<std::uint64_t> value;
  };
  Progress progress[kProgressCounters];
  // What the owner sleeps on (SharedWorkspace::wait_any): per counter, the value waited for (0: nothing) and
  // the rank (-1: every rank but the owner). A rank that publishes a counter wakes the owner if that holds.
  alignas(64) std::atomic<std::uint64_t> want_value[kProgressCounters];
  std::atomic<std::int32_t> want_rank[kProgressCounters];
  // Signature of the op whose piece is in each slot (set before the piece is published).
  alignas(64) std::atomic<std::uint64_t> slot_signature[kMaxSlots];
};

struct alignas(64) RingHeader {
  alignas(64) std::atomic<std::uint64_t> head;  // bytes written (producer)
  alignas(64) std::atomic<std::uint64_t> tail;  // bytes read (consumer)
};

static_assert(std::atomic<std::uint32_t>::is_always_lock_free && std::atomic<std::uint64_t>::is_always_lock_free,
              "shared-memory atomics must be lock free");

// Layout: header, one ring per sender, then the owner's parts (barrier-based algorithms), then its slots
// (pipelined algorithms); both slot-sized. tmpfs pages are touched only as used.
inline std::size_t rings_end(int size, std::size_t ring_bytes) {
  return sizeof(SegmentHeader) + static_cast<std::size_t>(size) * (sizeof(RingHeader) + ring_bytes);
}
inline std::size_t slots_begin(int size, std::size_t ring_bytes, int parts, std::size_t slot_bytes) {
  return rings_end(size, ring_bytes) + static_cast<std::size_t>(parts) * slot_bytes;
}
inline std::size_t segment_bytes(int size, std::size_t ring_bytes, int parts, std::size_t slot_bytes, int slots) {
  return slots_begin(size, ring_bytes, parts, slot_bytes) + static_cast<std::size_t>(slots) * slot_bytes;
}

inline RingHeader* ring_header(void* segment, int sender, std::size_t ring_bytes) {
  return reinterpret_cast<RingHeader*>(static_cast<char*>(segment) + sizeof(SegmentHeader) +
                                       static_cast<std::size_t>(sender) * (sizeof(RingHeader) + ring_bytes));
}

inline char* ring_data(void* segment, int sender, std::size_t ring_bytes) {
  return reinterpret_cast<char*>(ring_header(segment, sender, ring_bytes)) + sizeof(RingHeader);
}

}  // namespace ctrun::comm::transport::shm
