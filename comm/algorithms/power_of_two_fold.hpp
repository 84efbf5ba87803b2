#pragma once
// How the exchange algorithms that want a power of two of ranks (recursive doubling, halving/doubling) take any
// count (MPICH's scheme): with n = p2 + rem, the first 2*rem ranks pair up; the even one hands its buffer to the
// odd one, which reduces it in, and sits out until the end, when it gets the result back. The others take part as
// the virtual ranks 0..p2-1.

#include "comm/algorithms/context.hpp"
#include "comm/buffer.hpp"

namespace ctrun::comm::algorithms {

struct PowerOfTwoFold {
  int p2 = 1;      // the largest power of two <= n
  int rem = 0;     // n - p2: ranks folded into a partner
  int vrank = -1;  // this rank's virtual rank among the p2, or -1 while it sits out
  // The real rank of virtual rank v.
  int real(int v) const { return v < rem ? v * 2 + 1 : v + rem; }
};

// The fold in: sends or receives and reduces the buffer as the pairing says.
PowerOfTwoFold fold_in(Context& ctx, Buffer buffer, ReduceOp op);
// The fold out: the ranks that sat out get the result from their partner.
void fold_out(Context& ctx, Buffer buffer, const PowerOfTwoFold& fold);

}  // namespace ctrun::comm::algorithms
