#pragma once
// What every algorithm of the cpu backend runs against: this rank's place in the group, nonblocking tagged
// send/recv to peers (all messages of one collective share the collective's tag; per-peer FIFO order keeps
// them apart), the op's deadline, and reusable scratch memory.

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "comm/transport/messenger.hpp"
#include "comm/types.hpp"

namespace ctrun::comm::algorithms {

using transport::Clock;
using transport::RequestPtr;

// Scratch memory that survives across ops (no allocation per op on the hot path).
class Scratch {
 public:
  char* get(std::size_t bytes, int slot = 0) {
    if (slots_.size() <= static_cast<std::size_t>(slot)) slots_.resize(static_cast<std::size_t>(slot) + 1);
    auto& s = slots_[static_cast<std::size_t>(slot)];
    if (s.size() < bytes) s.resize(bytes);
    return s.data();
  }

 private:
  std::vector<std::vector<char>> slots_;
};

class Context {
 public:
  Context(transport::Messenger& messenger, int rank, int size, std::uint64_t tag, Clock::time_point deadline,
          Scratch& scratch, std::size_t chunk_bytes, std::span<const int> members = {})
      : messenger_(messenger),
        rank_(rank),
        size_(size),
        tag_(tag),
        deadline_(deadline),
        scratch_(scratch),
        chunk_bytes_(chunk_bytes),
        members_(members) {}

  int rank() const { return rank_; }
  int size() const { return size_; }
  // Rank at distance d along the ring (negative d: to the left).
  int peer(int d) const { return ((rank_ + d) % size_ + size_) % size_; }

  RequestPtr isend(int peer, const void* data, std::size_t bytes) {
    return messenger_.post_send(member(peer), tag_, data, bytes);
  }
  RequestPtr irecv(int peer, void* data, std::size_t bytes) {
    return messenger_.post_recv(member(peer), tag_, data, bytes);
  }
  void wait(const RequestPtr& r) { messenger_.wait(r, deadline_); }
  void wait(const std::vector<RequestPtr>& rs) { messenger_.wait(rs, deadline_); }
  void send(int peer, const void* data, std::size_t bytes) { wait(isend(peer, data, bytes)); }
  void recv(int peer, void* data, std::size_t bytes) { wait(irecv(peer, data, bytes)); }

  char* scratch(std::size_t bytes, int slot = 0) { return scratch_.get(bytes, slot); }
  // Group-wide shared memory (shm transport) or null.
  transport::SharedWorkspace* workspace() { return messenger_.transport().workspace(); }
  Clock::time_point deadline() const { return deadline_; }
  // Identifies this call (op, dtype, sequence number) and a size on every rank alike: shared-memory barriers
  // compare it to catch ranks that run different ops or sizes.
  std::uint64_t signature(std::size_t size) const { return tag_ ^ (size * 0x9e3779b97f4a7c15ull); }
  // Pipelining unit of the chunked algorithms (ring, chain).
  std::size_t chunk_bytes() const { return chunk_bytes_; }
  std::uint64_t tag() const { return tag_; }
  transport::Messenger& messenger() { return messenger_; }
  Scratch& scratch_memory() { return scratch_; }

 private:
  // A context over some of the messenger's peers (one level of a two-level group, two_level.hpp) numbers them
  // 0..size-1; members_ maps those numbers to the messenger's. Empty: every peer, numbered as the messenger does.
  int member(int peer) const { return members_.empty() ? peer : members_[static_cast<std::size_t>(peer)]; }

  transport::Messenger& messenger_;
  int rank_;
  int size_;
  std::uint64_t tag_;
  Clock::time_point deadline_;
  Scratch& scratch_;
  std::size_t chunk_bytes_;
  std::span<const int> members_;
};

// Elements [begin, begin + count) of a buffer split into `parts` near-equal blocks (the first count % parts
// blocks one element longer). Every rank computes the same split.
struct Span {
  std::size_t begin = 0;
  std::size_t count = 0;
};
inline Span block_of(std::size_t count, int parts, int index) {
  const std::size_t base = count / static_cast<std::size_t>(parts);
  const std::size_t extra = count % static_cast<std::size_t>(parts);
  const auto i = static_cast<std::size_t>(index);
  return {i * base + std::min(i, extra), base + (i < extra ? 1 : 0)};
}

// Chunks of a block for pipelining: at least one element, at most chunk_bytes.
inline std::size_t chunk_elements(std::size_t chunk_bytes, std::size_t element_bytes) {
  return std::max<std::size_t>(1, chunk_bytes / element_bytes);
}

}  // namespace ctrun::comm::algorithms
