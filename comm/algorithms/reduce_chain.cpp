// Pipelined chain reduce: root+n-1 -> ... -> root+1 -> root, each rank folds a chunk into its own and forwards
// it while the next chunk is in flight. Bandwidth-friendly for large messages.
#include <algorithm>

#include "comm/algorithms/algorithms.hpp"
#include "comm/reduce/reduce.hpp"

namespace ctrun::comm::algorithms {

void reduce_chain(Context& ctx, Buffer buffer, int root, ReduceOp op) {
  const int n = ctx.size();
  if (n == 1 || buffer.empty()) return;
  const int vrank = (ctx.rank() - root + n) % n;
  const int towards_root = (ctx.rank() - 1 + n) % n;
  const int from = (ctx.rank() + 1) % n;
  const std::size_t es = element_size(buffer.dtype());
  const std::size_t ce = chunk_elements(ctx.chunk_bytes(), es);
  const std::size_t count = buffer.count();
  char* data = static_cast<char*>(buffer.data());
  std::vector<RequestPtr> sends;
  if (vrank == n - 1) {
    for (std::size_t off = 0; off < count; off += ce) {
      sends.push_back(ctx.isend(towards_root, data + off * es, std::min(ce, count - off) * es));
    }
    ctx.wait(sends);
    return;
  }
  char* tmp = ctx.scratch(buffer.bytes());
  std::vector<RequestPtr> recvs;
  for (std::size_t off = 0; off < count; off += ce) {
    recvs.push_back(ctx.irecv(from, tmp + off * es, std::min(ce, count - off) * es));
  }
  std::size_t c = 0;
  for (std::size_t off = 0; off < count; off += ce, ++c) {
    const std::size_t len = std::min(ce, count - off);
    ctx.wait(recvs[c]);
    reduce::reduce_into(buffer.dtype(), op, data + off * es, tmp + off * es, len);
    if (vrank != 0) sends.push_back(ctx.isend(towards_root, data + off * es, len * es));
  }
  ctx.wait(sends);
}

}  // namespace ctrun::comm::algorithms
