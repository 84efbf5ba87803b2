// Recursive-doubling all_reduce: log2(n) exchanges of the whole buffer. Fewest steps, so best for small
// messages. Non-powers of two fold the extra ranks in first (power_of_two_fold.hpp).
#include "comm/algorithms/algorithms.hpp"
#include "comm/algorithms/power_of_two_fold.hpp"
#include "comm/reduce/reduce.hpp"

namespace ctrun::comm::algorithms {

void all_reduce_recursive_doubling(Context& ctx, Buffer buffer, ReduceOp op) {
  if (ctx.size() == 1 || buffer.empty()) return;
  const std::size_t bytes = buffer.bytes();
  char* data = static_cast<char*>(buffer.data());
  const PowerOfTwoFold fold = fold_in(ctx, buffer, op);
  if (fold.vrank >= 0) {
    char* tmp = ctx.scratch(bytes);
    for (int mask = 1; mask < fold.p2; mask <<= 1) {
      const int peer = fold.real(fold.vrank ^ mask);
      auto r = ctx.irecv(peer, tmp, bytes);
      auto s = ctx.isend(peer, data, bytes);
      ctx.wait({r, s});
      // Float addition is commutative, so both partners compute bit-identical results.
      reduce::reduce_into(buffer.dtype(), op, data, tmp, buffer.count());
    }
  }
  fold_out(ctx, buffer, fold);
}

}  // namespace ctrun::comm::algorithms
