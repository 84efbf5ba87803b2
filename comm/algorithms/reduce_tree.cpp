// Binomial-tree reduce: ceil(log2 n) rounds; each rank folds in its children's partial results, then sends to
// its parent. Non-root buffers end up holding partial sums (allowed: only the root's result is defined).
#include "comm/algorithms/algorithms.hpp"
#include "comm/reduce/reduce.hpp"

namespace ctrun::comm::algorithms {

void reduce_tree(Context& ctx, Buffer buffer, int root, ReduceOp op) {
  const int n = ctx.size();
  if (n == 1 || buffer.empty()) return;
  const int vrank = (ctx.rank() - root + n) % n;
  const auto real = [&](int v) { return (v + root) % n; };
  char* data = static_cast<char*>(buffer.data());
  const std::size_t bytes = buffer.bytes();
  char* tmp = ctx.scratch(bytes);
  for (int mask = 1; mask < n; mask <<= 1) {
    if (vrank & mask) {
      ctx.send(real(vrank - mask), data, bytes);
      return;
    }
    if (vrank + mask < n) {
      ctx.recv(real(vrank + mask), tmp, bytes);
      reduce::reduce_into(buffer.dtype(), op, data, tmp, buffer.count());
    }
  }
}

}  // namespace ctrun::comm::algorithms
