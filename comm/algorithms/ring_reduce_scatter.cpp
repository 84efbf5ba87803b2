#include "comm/algorithms/ring_reduce_scatter.hpp"

#include <algorithm>
#include <cstring>

#include "comm/reduce/reduce.hpp"

namespace ctrun::comm::algorithms {

void ring_reduce_scatter(Context& ctx, const std::vector<RingBlock>& blocks, DataType dtype, ReduceOp op,
                         const std::function<void(std::size_t, std::size_t)>& on_final_chunk,
                         const std::function<void()>& post_more_recvs) {
  const int n = ctx.size();
  const int me = ctx.rank();
  const std::size_t es = element_size(dtype);
  const std::size_t ce = chunk_elements(ctx.chunk_bytes(), es);
  const auto mod = [n](int v) { return ((v % n) + n) % n; };
  const auto& own = blocks[static_cast<std::size_t>(me)];
  if (n == 1) {
    if (post_more_recvs) post_more_recvs();
    if (own.dst != own.src && own.count) std::memcpy(own.dst, own.src, own.count * es);
    for (std::size_t off = 0; off < own.count; off += ce) on_final_chunk(off, std::min(ce, own.count - off));
    return;
  }
  const int left = ctx.peer(-1);
  const int right = ctx.peer(1);
  std::size_t max_block = 0;
  for (const auto& b : blocks) max_block = std::max(max_block, b.count);
  // One scratch region per step, so every receive can be posted up front and lands without an extra copy.
  char* scratch = ctx.scratch(static_cast<std::size_t>(n - 1) * max_block * es, 1);

  std::vector<std::vector<RequestPtr>> recvs(static_cast<std::size_t>(n - 1));
  for (int s = 0; s < n - 1; ++s) {
    const auto& b = blocks[static_cast<std::size_t>(mod(me - 2 - s))];
    char* region = scratch + static_cast<std::size_t>(s) * max_block * es;
    for (std::size_t off = 0; off < b.count; off += ce) {
      recvs[static_cast<std::size_t>(s)].push_back(
          ctx.irecv(left, region + off * es, std::min(ce, b.count - off) * es));
    }
  }
  if (post_more_recvs) post_more_recvs();
  std::vector<RequestPtr> sends;
  {
    const auto& b = blocks[static_cast<std::size_t>(mod(me - 1))];
    for (std::size_t off = 0; off < b.count; off += ce) {
      sends.push_back(ctx.isend(right, b.src + off * es, std::min(ce, b.count - off) * es));
    }
  }
  for (int s = 0; s < n - 1; ++s) {
    const auto& b = blocks[static_cast<std::size_t>(mod(me - 2 - s))];
    const char* region = scratch + static_cast<std::size_t>(s) * max_block * es;
    std::size_t c = 0;
    for (std::size_t off = 0; off < b.count; off += ce, ++c) {
      const std::size_t len = std::min(ce, b.count - off);
      ctx.wait(recvs[static_cast<std::size_t>(s)][c]);
      reduce::reduce_to(dtype, op, b.dst + off * es, b.src + off * es, region + off * es, len);
      if (s < n - 2) {
        sends.push_back(ctx.isend(right, b.dst + off * es, len * es));  // this block is step s+1's send block
      } else {
        on_final_chunk(off, len);
      }
    }
  }
  ctx.wait(sends);
}

}  // namespace ctrun::comm::algorithms
