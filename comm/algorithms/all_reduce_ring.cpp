// Ring all_reduce (reduce-scatter then all-gather), chunked and pipelined: each rank sends and receives
// 2(n-1)/n of the buffer, the minimum, so it wins for large messages. Works for any n and any count.
#include <algorithm>

#include "comm/algorithms/algorithms.hpp"
#include "comm/algorithms/ring_reduce_scatter.hpp"

namespace ctrun::comm::algorithms {

void all_reduce_ring(Context& ctx, Buffer buffer, ReduceOp op) {
  const int n = ctx.size();
  if (n == 1 || buffer.empty()) return;
  const int me = ctx.rank();
  const std::size_t es = element_size(buffer.dtype());
  const std::size_t ce = chunk_elements(ctx.chunk_bytes(), es);
  const auto mod = [n](int v) { return ((v % n) + n) % n; };
  char* base = static_cast<char*>(buffer.data());
  std::vector<RingBlock> blocks(static_cast<std::size_t>(n));
  std::vector<Span> spans(static_cast<std::size_t>(n));
  for (int b = 0; b < n; ++b) {
    spans[static_cast<std::size_t>(b)] = block_of(buffer.count(), n, b);
    char* p = base + spans[static_cast<std::size_t>(b)].begin * es;
    blocks[static_cast<std::size_t>(b)] = {p, p, spans[static_cast<std::size_t>(b)].count};
  }
  const int right = ctx.peer(1);
  const int left = ctx.peer(-1);
  std::vector<RequestPtr> sends;
  char* own = blocks[static_cast<std::size_t>(me)].dst;
  // The all-gather receives are posted right behind the reduce-scatter's last one, so they land in place.
  // Safe although they target blocks this rank still reduces and sends: the final value of block b reaches us
  // only after our own reduce-scatter send of b was consumed downstream, hence after we finished with b.
  std::vector<std::vector<RequestPtr>> recvs(static_cast<std::size_t>(n - 1));
  const auto post_all_gather_recvs = [&] {
    for (int t = 0; t < n - 1; ++t) {
      const auto& b = blocks[static_cast<std::size_t>(mod(me - t - 1))];
      for (std::size_t off = 0; off < b.count; off += ce) {
        recvs[static_cast<std::size_t>(t)].push_back(
            ctx.irecv(left, b.dst + off * es, std::min(ce, b.count - off) * es));
      }
    }
  };
  // All-gather step 0 (sending our final block) starts chunk by chunk as the reduce-scatter finishes it.
  ring_reduce_scatter(
      ctx, blocks, buffer.dtype(), op,
      [&](std::size_t off, std::size_t len) { sends.push_back(ctx.isend(right, own + off * es, len * es)); },
      post_all_gather_recvs);
  for (int t = 0; t < n - 1; ++t) {
    const auto& b = blocks[static_cast<std::size_t>(mod(me - t - 1))];
    std::size_t c = 0;
    for (std::size_t off = 0; off < b.count; off += ce, ++c) {
      ctx.wait(recvs[static_cast<std::size_t>(t)][c]);
      if (t < n - 2) sends.push_back(ctx.isend(right, b.dst + off * es, std::min(ce, b.count - off) * es));
    }
  }
  ctx.wait(sends);
}

}  // namespace ctrun::comm::algorithms
