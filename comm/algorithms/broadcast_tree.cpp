// Binomial-tree broadcast: ceil(log2 n) rounds, each rank receives once and forwards to its subtree.
// Latency-optimal for small messages.
#include "comm/algorithms/algorithms.hpp"

namespace ctrun::comm::algorithms {

void broadcast_tree(Context& ctx, Buffer buffer, int root) {
  const int n = ctx.size();
  if (n == 1 || buffer.empty()) return;
  const int vrank = (ctx.rank() - root + n) % n;
  const auto real = [&](int v) { return (v + root) % n; };
  char* data = static_cast<char*>(buffer.data());
  const std::size_t bytes = buffer.bytes();
  int mask = 1;
  while (mask < n) {
    if (vrank & mask) {
      ctx.recv(real(vrank - mask), data, bytes);
      break;
    }
    mask <<= 1;
  }
  std::vector<RequestPtr> sends;
  for (mask >>= 1; mask > 0; mask >>= 1) {
    if (vrank + mask < n) sends.push_back(ctx.isend(real(vrank + mask), data, bytes));
  }
  ctx.wait(sends);
}

}  // namespace ctrun::comm::algorithms
