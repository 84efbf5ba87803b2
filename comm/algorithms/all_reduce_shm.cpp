// Shared-memory all_reduce, pipelined (shm_pipeline.hpp). Per piece k (one slot of elements):
//   produce:  copy piece k of the buffer into the own slot k % slots, publish kProduced;
//   reduce:   once every rank produced k, rank r reduces slice r of piece k over all slots in rank order into
//             its buffer and into its own slot (the slice no one else reads there), publish kReduced;
//   copy out: once every rank reduced k, copy every other rank's slice out of its slot into the buffer,
//             publish kReleased.
// Small pieces (a short op, or the short last piece) skip the split: every rank reduces the whole piece itself.
// Every element is reduced in the same order on one rank, so all ranks get bit-identical results. A rank takes
// the oldest step it can, produces ahead (as far as free slots allow) only while older steps must wait, and
// when nothing can run sleeps until any of its next steps can.
#include <algorithm>
#include <cstring>

#include "comm/algorithms/algorithms.hpp"
#include "comm/algorithms/shm_pipeline.hpp"
#include "comm/reduce/reduce.hpp"

namespace ctrun::comm::algorithms {
namespace {

// Below this a piece is reduced whole by every rank: splitting it would cost another round of waits.
constexpr std::size_t kWholePieceBytes = 32 << 10;

}  // namespace

void all_reduce_shm(Context& ctx, Buffer buffer, ReduceOp op) {
  using WS = Pipeline::WS;
  const int n = ctx.size();
  // More ranks than cores: every all-rank wait costs a round of scheduling every rank, and this pipeline
  // needs two per piece; the barrier variant needs one (measured faster there, docs/benchmarks.md). It also
  // handles one rank.
  if (n == 1 || ctx.workspace()->oversubscribed() || buffer.bytes() < ctx.workspace()->pipeline_bytes())
    return all_reduce_shm_barrier(ctx, buffer, op);
  auto& ws = *ctx.workspace();
  const int me = ctx.rank();
  const DataType dtype = buffer.dtype();
  const std::size_t es = element_size(dtype);
  const std::size_t count = buffer.count();
  const std::size_t piece = std::max<std::size_t>(ws.slot_bytes() / es, 1);
  Pipeline pl(ws, (count + piece - 1) / piece);
  const std::uint64_t signature = ctx.signature(count);
  char* data = static_cast<char*>(buffer.data());
  auto span = [&](std::uint64_t k) {
    const std::size_t off = static_cast<std::size_t>(k) * piece;
    return std::pair<std::size_t, std::size_t>{off, std::min(piece, count - std::min(count, off))};
  };
  auto whole = [&](std::uint64_t k) { return span(k).second * es <= std::min(kWholePieceBytes, ws.slot_bytes() / 8); };
  auto reduce_piece = [&](std::uint64_t k) {
    for (int r = 0; r < n; ++r) {
      if (r != me) pl.check(r, k, signature);
    }
    const auto [off, len] = span(k);
    char* mine = data + off * es;
    if (whole(k)) {
      if (len) {
        reduce::reduce_to(dtype, op, mine, pl.slot(0, k), pl.slot(1, k), len);
        for (int r = 2; r < n; ++r) reduce::reduce_into(dtype, op, mine, pl.slot(r, k), len);
      }
      return;
    }
    const Span s = block_of(len, n, me);
    const std::size_t at = s.begin * es;
    reduce::reduce_to(dtype, op, mine + at, pl.slot(0, k) + at, pl.slot(1, k) + at, s.count);
    for (int r = 2; r < n; ++r) reduce::reduce_into(dtype, op, mine + at, pl.slot(r, k) + at, s.count);
    std::memcpy(pl.slot(me, k) + at, mine + at, s.count * es);
    pl.publish(WS::kReduced, k);
  };
  auto copy_out = [&](std::uint64_t k) {
    if (!whole(k)) {
      const auto [off, len] = span(k);
      for (int i = 1; i < n; ++i) {
        const int r = (me + i) % n;
        const Span s = block_of(len, n, r);
        // Plain stores: these lines of the buffer were read when the piece was copied in and are still cached.
        std::memcpy(data + (off + s.begin) * es, pl.slot(r, k) + s.begin * es, s.count * es);
      }
    }
    pl.publish(WS::kReleased, k);
  };
  auto produce = [&](std::uint64_t k) {
    const auto [off, len] = span(k);
    if (len) std::memcpy(pl.slot(me, k), data + off * es, len * es);
    pl.produce(k, signature);
  };
  std::vector<WS::Want> wants;
  std::uint64_t prod = 0;
  std::uint64_t red = 0;
  std::uint64_t out = 0;
  // One step at a time, the oldest piece's first: copying out and reducing data that was just copied in keeps
  // it in the caches; a rank produces further ahead only while it cannot finish older pieces (peers lag).
  while (out < pl.count()) {
    if (out < red && (whole(out) || pl.reached(-1, WS::kReduced, out))) {
      copy_out(out++);
      continue;
    }
    if (red < prod && pl.reached(-1, WS::kProduced, red)) {
      reduce_piece(red++);
      continue;
    }
    if (prod < pl.count() && pl.slot_free(prod)) {
      produce(prod++);
      continue;
    }
    wants.clear();
    if (out < red) wants.push_back(pl.reached_want(-1, WS::kReduced, out));
    if (red < prod) wants.push_back(pl.reached_want(-1, WS::kProduced, red));
    if (prod < pl.count()) wants.push_back(pl.slot_free_want(prod));
    pl.wait(wants, ctx.deadline());
  }
  pl.finish();
}

}  // namespace ctrun::comm::algorithms
