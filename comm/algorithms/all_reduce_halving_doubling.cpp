// Rabenseifner's all_reduce: a reduce-scatter by recursive halving, then an all-gather by recursive doubling.
// 2 log2(n) steps, like recursive doubling's log2(n) but each moving half the data of the one before, so a rank
// sends and receives 2(n-1)/n of the buffer, as in the ring: the middle sizes, where the ring's 2(n-1) steps
// still cost more than its bytes save and recursive doubling's log2(n) whole buffers already cost more.
// Non-powers of two fold the extra ranks in first, as recursive doubling does (power_of_two_fold.hpp).
#include "comm/algorithms/algorithms.hpp"
#include "comm/algorithms/power_of_two_fold.hpp"
#include "comm/reduce/reduce.hpp"

namespace ctrun::comm::algorithms {
namespace {

// Elements of blocks [first, first + blocks) of the buffer cut into `parts` blocks (block_of's split).
Span blocks_span(std::size_t count, int parts, int first, int blocks) {
  const Span a = block_of(count, parts, first);
  const Span b = block_of(count, parts, first + blocks - 1);
  return {a.begin, b.begin + b.count - a.begin};
}

}  // namespace

void all_reduce_halving_doubling(Context& ctx, Buffer buffer, ReduceOp op) {
  const int n = ctx.size();
  if (n == 1 || buffer.empty()) return;
  const std::size_t count = buffer.count();
  const std::size_t es = element_size(buffer.dtype());
  char* data = static_cast<char*>(buffer.data());
  const PowerOfTwoFold fold = fold_in(ctx, buffer, op);
  const int p2 = fold.p2;
  const int vrank = fold.vrank;
  if (vrank >= 0) {
    const auto real = [&fold](int v) { return fold.real(v); };
    // Reduce-scatter: at each step keep the half of the current range on this rank's side of the mask bit, send
    // the other half to the partner and reduce the partner's copy of the kept half into place. Each block ends
    // reduced on exactly one rank (block vrank), so every rank later holds the same bits.
    char* tmp = ctx.scratch(blocks_span(count, p2, 0, p2 / 2).count * es);
    int first = 0;
    for (int half = p2 / 2; half >= 1; half /= 2) {
      const int peer = real(vrank ^ half);
      const bool upper = (vrank & half) != 0;
      const Span keep = blocks_span(count, p2, upper ? first + half : first, half);
      const Span give = blocks_span(count, p2, upper ? first : first + half, half);
      auto r = ctx.irecv(peer, tmp, keep.count * es);
      auto s = ctx.isend(peer, data + give.begin * es, give.count * es);
      ctx.wait({r, s});
      reduce::reduce_into(buffer.dtype(), op, data + keep.begin * es, tmp, keep.count);
      if (upper) first += half;
    }
    // All-gather: the reverse, each step swapping the range this rank holds for its partner's, straight in place.
    for (int size = 1; size < p2; size *= 2) {
      const int peer = real(vrank ^ size);
      const int mine = vrank & ~(size - 1);
      const int theirs = (vrank ^ size) & ~(size - 1);
      const Span have = blocks_span(count, p2, mine, size);
      const Span want = blocks_span(count, p2, theirs, size);
      auto r = ctx.irecv(peer, data + want.begin * es, want.count * es);
      auto s = ctx.isend(peer, data + have.begin * es, have.count * es);
      ctx.wait({r, s});
    }
  }
  fold_out(ctx, buffer, fold);
}

}  // namespace ctrun::comm::algorithms
