#pragma once
// What the *_shm_direct algorithms share: each rank publishes the addresses of its buffers in its workspace part
// for the op; after a barrier, peers read those buffers in place with SharedWorkspace::read_peer
// (process_vm_readv). Every such algorithm runs a fixed number of barriers per op whatever the size, instead of
// one per workspace piece: with 8 ranks on 2 cores each barrier costs a round of sleeps and wake-ups.
#include <cstdint>
#include <vector>

#include "comm/algorithms/context.hpp"

namespace ctrun::comm::algorithms {

class PeerBuffers {
 public:
  // Takes the op's workspace part (the same on every rank) and writes this rank's buffer addresses into it.
  PeerBuffers(transport::SharedWorkspace& ws, int rank, const std::vector<const void*>& mine)
      : ws_(ws), part_(ws.next_part()) {
    auto* slots = reinterpret_cast<std::uint64_t*>(ws_.part(rank, part_));
    for (std::size_t i = 0; i < mine.size(); ++i) slots[i] = reinterpret_cast<std::uint64_t>(mine[i]);
  }

  // Whether `count` addresses fit in a workspace part (else the algorithms fall back to the piecewise ones).
  static bool fits(const transport::SharedWorkspace& ws, std::size_t count) {
    return count * sizeof(std::uint64_t) <= ws.part_bytes();
  }

  // Address (in rank r's process) of rank r's buffer i; valid after the barrier that follows every publish.
  std::uint64_t address(int r, std::size_t i = 0) const {
    return reinterpret_cast<const std::uint64_t*>(ws_.part(r, part_))[i];
  }

  // Copies bytes [offset, offset + bytes) of rank r's buffer i into `local`.
  void read(int r, std::size_t i, std::size_t offset, void* local, std::size_t bytes) const {
    if (bytes) ws_.read_peer(r, address(r, i) + offset, local, bytes);
  }

 private:
  transport::SharedWorkspace& ws_;
  int part_;
};

}  // namespace ctrun::comm::algorithms
