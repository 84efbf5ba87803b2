#include "comm/algorithms/ring_reduce_scatter.hpp"

#include <algorithm>
#include <cstring>

#include "comm/reduce/reduce.hpp"

namespace ctrun::comm::algorithms {
namespace {
constexpr std::size_t kRingSlots = 4;
}  // namespace

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
  // Every chunk this rank receives, in arrival order: step s brings block (rank-2-s) from the left.
  struct Piece {
    int step;
    const RingBlock* block;
    std::size_t off;  // elements
    std::size_t len;
  };
  std::vector<Piece> pieces;
  for (int s = 0; s < n - 1; ++s) {
    const auto& b = blocks[static_cast<std::size_t>(mod(me - 2 - s))];
    for (std::size_t off = 0; off < b.count; off += ce) pieces.push_back({s, &b, off, std::min(ce, b.count - off)});
  }
  const std::size_t total = pieces.size();
  // Chunks arrive into `slots` reused chunk-sized slots (a few MiB that stay in the caches) rather than into a
  // scratch region per step ((n-1)/n of the buffer, which the kernel's copy and the reduction then each stream
  // through DRAM): 5-7 % less time at 16-64 MiB on 4 ranks (docs/benchmarks.md). A receive is posted when its
  // slot is free; chunks that come earlier wait in the socket (the messenger holds early collective messages).
  const std::size_t slots = std::min(total, kRingSlots);
  char* tmp = ctx.scratch(slots * ce * es, 1);
  std::vector<RequestPtr> recvs(total);
  std::size_t posted = 0;
  const auto post_next = [&] {
    const Piece& p = pieces[posted];
    recvs[posted] = ctx.irecv(left, tmp + (posted % slots) * ce * es, p.len * es);
    if (++posted == total && post_more_recvs) post_more_recvs();
  };
  while (posted < slots) post_next();
  if (total == 0 && post_more_recvs) post_more_recvs();

  std::vector<RequestPtr> sends;
  {
    const auto& b = blocks[static_cast<std::size_t>(mod(me - 1))];
    for (std::size_t off = 0; off < b.count; off += ce) {
      sends.push_back(ctx.isend(right, b.src + off * es, std::min(ce, b.count - off) * es));
    }
  }
  for (std::size_t i = 0; i < total; ++i) {
    const Piece& p = pieces[i];
    ctx.wait(recvs[i]);
    recvs[i].reset();
    const char* in = tmp + (i % slots) * ce * es;
    reduce::reduce_to(dtype, op, p.block->dst + p.off * es, p.block->src + p.off * es, in, p.len);
    if (posted < total) post_next();  // slot i % slots is free again
    if (p.step < n - 2) {
      sends.push_back(ctx.isend(right, p.block->dst + p.off * es, p.len * es));  // step s+1's send block
    } else {
      on_final_chunk(p.off, p.len);
    }
  }
  ctx.wait(sends);
}

}  // namespace ctrun::comm::algorithms
