#pragma once
// The reduce-scatter phase of the ring algorithms, shared by all_reduce_ring and reduce_scatter_ring.
// n-1 steps; at step s a rank sends block (rank-1-s) to its right neighbour and receives block (rank-2-s) from
// its left one, reducing it into place. Blocks are cut into chunks and a reduced chunk is forwarded at once, so
// transfers of the next step overlap the reductions of this one. Chunks are received into a few reused slots.

#include <cstddef>
#include <functional>
#include <vector>

#include "comm/algorithms/context.hpp"

namespace ctrun::comm::algorithms {

struct RingBlock {
  const char* src = nullptr;  // this rank's contribution to the block
  char* dst = nullptr;        // where partial / final reductions go (may equal src: in place)
  std::size_t count = 0;      // elements
};

// Afterwards blocks[rank].dst holds the reduction over all ranks of their blocks[rank].src. on_final_chunk is
// called with (element offset, count) as each chunk of that block becomes final. post_more_recvs runs right after
// this phase posted its last receive, so a caller can post the receives of a following phase behind them (in
// per-peer FIFO order); what arrives before is held in the pipe by the messenger, not buffered.
void ring_reduce_scatter(Context& ctx, const std::vector<RingBlock>& blocks, DataType dtype, ReduceOp op,
                         const std::function<void(std::size_t, std::size_t)>& on_final_chunk,
                         const std::function<void()>& post_more_recvs = {});

}  // namespace ctrun::comm::algorithms
