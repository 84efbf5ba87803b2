#pragma once
// What the pipelined shared-memory algorithms (*_shm.cpp) share: pieces numbered group-wide, slots reused only
// once every reader released them, signatures checked on every piece read (transport.hpp, SharedWorkspace).
//
// Each op takes its pieces with Pipeline(ws, pieces) (at least one, even for an empty buffer: ranks that passed
// different sizes then meet at that piece and compare signatures), and ends with finish(), which raises all of
// this rank's counters past the op's last piece (a rank that produced or reduced nothing in an op, such as a
// broadcast receiver, must not hold up the next op's waits).
#include <algorithm>
#include <cstdint>
#include <vector>

#include "comm/algorithms/context.hpp"

namespace ctrun::comm::algorithms {

class Pipeline {
 public:
  using WS = transport::SharedWorkspace;

  Pipeline(WS& ws, std::uint64_t pieces) : ws_(ws), first_(ws.take_pieces(std::max<std::uint64_t>(pieces, 1))) {
    count_ = std::max<std::uint64_t>(pieces, 1);
  }

  std::uint64_t count() const { return count_; }
  // Group-wide number of the op's piece k.
  std::uint64_t global(std::uint64_t k) const { return first_ + k; }

  // Whether this rank may write piece k into its slot: every other rank released the piece that used it before.
  bool slot_free(std::uint64_t k) const {
    const std::uint64_t g = global(k);
    const auto slots = static_cast<std::uint64_t>(ws_.slots());
    return g < slots || ws_.others_progress(WS::kReleased) >= g - slots + 1;
  }
  WS::Want slot_free_want(std::uint64_t k) const {
    const std::uint64_t g = global(k);
    const auto slots = static_cast<std::uint64_t>(ws_.slots());
    return {WS::kReleased, -1, g < slots ? 0 : g - slots + 1};
  }
  // Whether rank r (-1: every other rank) has passed `counter` for piece k.
  bool reached(int r, WS::Counter counter, std::uint64_t k) const {
    return (r < 0 ? ws_.others_progress(counter) : ws_.progress(r, counter)) >= global(k) + 1;
  }
  WS::Want reached_want(int r, WS::Counter counter, std::uint64_t k) const { return {counter, r, global(k) + 1}; }

  char* slot(int r, std::uint64_t k) const { return ws_.slot(r, global(k)); }

  // Marks piece k as produced under `signature` (after its bytes are in the slot).
  void produce(std::uint64_t k, std::uint64_t signature) {
    ws_.set_slot_signature(global(k), signature);
    ws_.publish(WS::kProduced, global(k) + 1);
  }
  // Throws a named PeerError unless rank r produced piece k under `signature`.
  void check(int r, std::uint64_t k, std::uint64_t signature) const {
    if (ws_.slot_signature(r, global(k)) != signature) ws_.mismatch(r);
  }
  void publish(WS::Counter counter, std::uint64_t k) { ws_.publish(counter, global(k) + 1); }

  void wait(const std::vector<WS::Want>& wants, Clock::time_point deadline) { ws_.wait_any(wants, deadline); }

  void finish() {
    const std::uint64_t end = first_ + count_;
    ws_.publish(WS::kProduced, end);
    ws_.publish(WS::kReduced, end);
    ws_.publish(WS::kReleased, end);
  }

 private:
  WS& ws_;
  std::uint64_t first_;
  std::uint64_t count_;
};

}  // namespace ctrun::comm::algorithms
