// Recursive-doubling all_reduce: log2(n) exchanges of the whole buffer. Fewest steps, so best for small
// messages. Non-powers of two (MPICH's scheme): the first 2*rem ranks pair up, the even one hands its data to
// the odd one and sits out, and gets the result back at the end.
#include <bit>

#include "comm/algorithms/algorithms.hpp"
#include "comm/reduce/reduce.hpp"

namespace ctrun::comm::algorithms {

void all_reduce_recursive_doubling(Context& ctx, Buffer buffer, ReduceOp op) {
  const int n = ctx.size();
  if (n == 1 || buffer.empty()) return;
  const int me = ctx.rank();
  const std::size_t bytes = buffer.bytes();
  char* data = static_cast<char*>(buffer.data());
  char* tmp = ctx.scratch(bytes);
  const int p2 = static_cast<int>(std::bit_floor(static_cast<unsigned>(n)));
  const int rem = n - p2;

  int vrank = me - rem;
  if (me < 2 * rem) {
    if (me % 2 == 0) {
      ctx.send(me + 1, data, bytes);
      vrank = -1;
    } else {
      ctx.recv(me - 1, tmp, bytes);
      reduce::reduce_into(buffer.dtype(), op, data, tmp, buffer.count());
      vrank = me / 2;
    }
  }
  if (vrank >= 0) {
    for (int mask = 1; mask < p2; mask <<= 1) {
      const int vpeer = vrank ^ mask;
      const int peer = vpeer < rem ? vpeer * 2 + 1 : vpeer + rem;
      auto r = ctx.irecv(peer, tmp, bytes);
      auto s = ctx.isend(peer, data, bytes);
      ctx.wait({r, s});
      // Float addition is commutative, so both partners compute bit-identical results.
      reduce::reduce_into(buffer.dtype(), op, data, tmp, buffer.count());
    }
  }
  if (me < 2 * rem) {
    if (me % 2 == 0) {
      ctx.recv(me + 1, data, bytes);
    } else {
      ctx.send(me - 1, data, bytes);
    }
  }
}

}  // namespace ctrun::comm::algorithms
