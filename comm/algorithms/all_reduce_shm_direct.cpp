// Shared-memory all_reduce, direct (reduce-scatter + all-gather with no staging copies), three barriers per op:
//   publish the buffer's address;                                                        barrier 1
//   rank r reduces slice r: chunk by chunk, it reads the chunk of every rank's buffer in rank order (its own in
//   place, peers' with process_vm_readv into an L2-sized scratch) into an accumulator, then writes the result
//   into slice r of its own buffer (peers read only other slices of it, so nothing they read changes);  barrier 2
//   rank r copies every other slice q straight out of rank q's buffer;                   barrier 3 (nobody reads
//   this rank's buffer any more when it returns).
// Each element is reduced on one rank in rank order, so every rank gets bit-identical results.
#include <algorithm>
#include <cstring>

#include "comm/algorithms/algorithms.hpp"
#include "comm/algorithms/peer_buffers.hpp"
#include "comm/reduce/reduce.hpp"

namespace ctrun::comm::algorithms {

void all_reduce_shm_direct(Context& ctx, Buffer buffer, ReduceOp op) {
  const int n = ctx.size();
  if (n == 1) return;
  auto& ws = *ctx.workspace();
  if (buffer.empty()) return ws.barrier(ctx.deadline(), ctx.signature(0));
  const int me = ctx.rank();
  const DataType dtype = buffer.dtype();
  const std::size_t es = element_size(dtype);
  const std::uint64_t signature = ctx.signature(buffer.count());
  char* data = static_cast<char*>(buffer.data());
  PeerBuffers peers(ws, me, {data});
  ws.barrier(ctx.deadline(), signature);

  const Span mine = block_of(buffer.count(), n, me);
  const std::size_t chunk = chunk_elements(ctx.chunk_bytes(), es);
  char* acc = ctx.scratch(std::min(chunk, std::max<std::size_t>(mine.count, 1)) * es, 0);
  char* tmp = ctx.scratch(std::min(chunk, std::max<std::size_t>(mine.count, 1)) * es, 1);
  for (std::size_t off = 0; off < mine.count; off += chunk) {
    const std::size_t len = std::min(chunk, mine.count - off);
    const std::size_t at = (mine.begin + off) * es;
    for (int q = 0; q < n; ++q) {
      const char* src = data + at;
      if (q != me) {
        peers.read(q, 0, at, q == 0 ? acc : tmp, len * es);
        src = q == 0 ? acc : tmp;
      }
      if (q == 0) {
        if (src != acc) std::memcpy(acc, src, len * es);
      } else {
        reduce::reduce_into(dtype, op, acc, src, len);
      }
    }
    std::memcpy(data + at, acc, len * es);
  }
  ws.barrier(ctx.deadline(), signature);

  for (int d = 1; d < n; ++d) {
    const int q = ctx.peer(d);
    const Span s = block_of(buffer.count(), n, q);
    peers.read(q, 0, s.begin * es, data + s.begin * es, s.count * es);
  }
  ws.barrier(ctx.deadline(), signature);
}

}  // namespace ctrun::comm::algorithms
