#include "comm/algorithms/power_of_two_fold.hpp"

#include <bit>

#include "comm/algorithms/algorithms.hpp"
#include "comm/reduce/reduce.hpp"

namespace ctrun::comm::algorithms {

PowerOfTwoFold fold_in(Context& ctx, Buffer buffer, ReduceOp op) {
  const int n = ctx.size();
  const int me = ctx.rank();
  PowerOfTwoFold fold;
  fold.p2 = static_cast<int>(std::bit_floor(static_cast<unsigned>(n)));
  fold.rem = n - fold.p2;
  fold.vrank = me - fold.rem;
  if (me < 2 * fold.rem) {
    char* data = static_cast<char*>(buffer.data());
    if (me % 2 == 0) {
      ctx.send(me + 1, data, buffer.bytes());
      fold.vrank = -1;
    } else {
      char* tmp = ctx.scratch(buffer.bytes());
      ctx.recv(me - 1, tmp, buffer.bytes());
      reduce::reduce_into(buffer.dtype(), op, data, tmp, buffer.count());
      fold.vrank = me / 2;
    }
  }
  return fold;
}

void fold_out(Context& ctx, Buffer buffer, const PowerOfTwoFold& fold) {
  const int me = ctx.rank();
  if (me >= 2 * fold.rem) return;
  if (me % 2 == 0) {
    ctx.recv(me + 1, buffer.data(), buffer.bytes());
  } else {
    ctx.send(me - 1, buffer.data(), buffer.bytes());
  }
}

}  // namespace ctrun::comm::algorithms
