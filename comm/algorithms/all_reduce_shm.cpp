// Shared-memory all_reduce, piece by piece (a piece fills one workspace half):
//   1. every rank copies its piece into its workspace;          barrier
//   2. rank r reduces slice r of the piece over all workspaces, in rank order, into its own buffer and
//      publishes it in its workspace;                            barrier
//   3. every rank copies the other slices' results out.
// Small pieces skip the split: after step 1 every rank reduces the whole piece itself (one barrier).
// Every element is reduced in the same order on one rank, so all ranks get bit-identical results.
#include <algorithm>
#include <cstring>

#include "comm/algorithms/algorithms.hpp"
#include "comm/reduce/reduce.hpp"

namespace ctrun::comm::algorithms {
namespace {
// Below this a piece is reduced whole by every rank: a second barrier costs more than the duplicated work.
constexpr std::size_t kWholePieceBytes = 32 << 10;
}  // namespace

void all_reduce_shm(Context& ctx, Buffer buffer, ReduceOp op) {
  const int n = ctx.size();
  if (n == 1 || buffer.empty()) return;
  auto* ws = ctx.workspace();
  const int me = ctx.rank();
  const DataType dtype = buffer.dtype();
  const std::size_t es = element_size(dtype);
  const std::size_t piece = ws->half_bytes() / es;
  char* data = static_cast<char*>(buffer.data());
  for (std::size_t off = 0; off < buffer.count(); off += piece) {
    const std::size_t len = std::min(piece, buffer.count() - off);
    const int h = ws->next_half();
    char* mine = data + off * es;
    std::memcpy(ws->half(me, h), mine, len * es);
    ws->barrier(ctx.deadline(), ctx.signature(buffer.count()));
    if (len * es <= std::min(kWholePieceBytes, ws->half_bytes() / 8)) {
      reduce::reduce_to(dtype, op, mine, ws->half(0, h), ws->half(1, h), len);
      for (int r = 2; r < n; ++r) reduce::reduce_into(dtype, op, mine, ws->half(r, h), len);
      continue;
    }
    const Span s = block_of(len, n, me);
    char* out = mine + s.begin * es;
    const std::size_t at = s.begin * es;
    reduce::reduce_to(dtype, op, out, ws->half(0, h) + at, ws->half(1, h) + at, s.count);
    for (int r = 2; r < n; ++r) reduce::reduce_into(dtype, op, out, ws->half(r, h) + at, s.count);
    std::memcpy(ws->half(me, h) + at, out, s.count * es);
    ws->barrier(ctx.deadline(), ctx.signature(buffer.count()));
    for (int r = 0; r < n; ++r) {
      if (r == me) continue;
      const Span o = block_of(len, n, r);
      std::memcpy(mine + o.begin * es, ws->half(r, h) + o.begin * es, o.count * es);
    }
  }
}

}  // namespace ctrun::comm::algorithms
