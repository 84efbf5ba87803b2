// Shared-memory all_reduce for groups with more ranks than cores (all_reduce_shm.cpp picks it), piece by piece
// through three rotating workspace parts, one all-rank barrier per piece:
//   1. every rank copies piece k into its workspace part;                barrier k
//   2. every rank copies out the results of piece k-1 (published before barrier k by their owners);
//   3. rank r reduces slice r of piece k over all workspaces, in rank order, into its own buffer, and publishes
//      it in its workspace (read by the others after barrier k+1; a last barrier follows the last piece).
// Small pieces skip the split: after step 1 every rank reduces the whole piece itself.
// Every element is reduced in the same order on one rank, so all ranks get bit-identical results.
// Three rotating parts make it safe: part p is rewritten at piece k+3, after barrier k+2, which every rank
// reaches only once it has finished reading piece k (step 2 of piece k+1).
// With 4 and 8 ranks on 2 cores this measured faster than the pipelined all_reduce (which needs two all-rank
// waits per piece, produced and reduced; docs/benchmarks.md): one barrier serves both.
#include <algorithm>
#include <cstring>

#include "comm/algorithms/algorithms.hpp"
#include "comm/reduce/reduce.hpp"

namespace ctrun::comm::algorithms {
namespace {

// Below this a piece is reduced whole by every rank: splitting it would cost another barrier.
constexpr std::size_t kWholePieceBytes = 32 << 10;

struct Published {
  char* dst = nullptr;  // the piece in the caller's buffer
  std::size_t len = 0;  // elements
  int part = -1;
};

void copy_out(transport::SharedWorkspace& ws, const Published& p, int n, int me, std::size_t es) {
  for (int r = 0; r < n; ++r) {
    if (r == me) continue;
    const Span o = block_of(p.len, n, r);
    std::memcpy(p.dst + o.begin * es, ws.part(r, p.part) + o.begin * es, o.count * es);
  }
}

}  // namespace

void all_reduce_shm_barrier(Context& ctx, Buffer buffer, ReduceOp op) {
  const int n = ctx.size();
  if (n == 1) return;
  // An empty buffer still meets the others at one barrier: a rank that passed more elements then gets a named
  // size mismatch instead of waiting for this one until the timeout.
  if (buffer.empty()) return ctx.workspace()->barrier(ctx.deadline(), ctx.signature(0));
  auto& ws = *ctx.workspace();
  const int me = ctx.rank();
  const DataType dtype = buffer.dtype();
  const std::size_t es = element_size(dtype);
  const std::size_t piece = ws.part_bytes() / es;
  const std::uint64_t signature = ctx.signature(buffer.count());
  char* data = static_cast<char*>(buffer.data());
  Published pending;
  for (std::size_t off = 0; off < buffer.count(); off += piece) {
    const std::size_t len = std::min(piece, buffer.count() - off);
    const int p = ws.next_part();
    char* mine = data + off * es;
    std::memcpy(ws.part(me, p), mine, len * es);
    ws.barrier(ctx.deadline(), signature);
    if (pending.part >= 0) copy_out(ws, pending, n, me, es);
    pending = {};
    if (len * es <= std::min(kWholePieceBytes, ws.part_bytes() / 8)) {
      reduce::reduce_to(dtype, op, mine, ws.part(0, p), ws.part(1, p), len);
      for (int r = 2; r < n; ++r) reduce::reduce_into(dtype, op, mine, ws.part(r, p), len);
      continue;
    }
    const Span s = block_of(len, n, me);
    char* out = mine + s.begin * es;
    const std::size_t at = s.begin * es;
    reduce::reduce_to(dtype, op, out, ws.part(0, p) + at, ws.part(1, p) + at, s.count);
    for (int r = 2; r < n; ++r) reduce::reduce_into(dtype, op, out, ws.part(r, p) + at, s.count);
    std::memcpy(ws.part(me, p) + at, out, s.count * es);
    pending = {mine, len, p};
  }
  if (pending.part >= 0) {
    ws.barrier(ctx.deadline(), signature);
    copy_out(ws, pending, n, me, es);
  }
}

}  // namespace ctrun::comm::algorithms
