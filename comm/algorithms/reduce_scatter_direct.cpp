// Direct reduce_scatter: each rank sends inputs[j] to rank j and reduces the n-1 pieces it receives. One
// step of latency, for small messages. Blocks may differ in size as long as all ranks agree (a two-level group's
// cross step: each host's ranks' blocks): inputs[j] has rank j's output's size.
#include <cstring>

#include "comm/algorithms/algorithms.hpp"
#include "comm/reduce/reduce.hpp"

namespace ctrun::comm::algorithms {

void reduce_scatter_direct(Context& ctx, Buffer output, const std::vector<Buffer>& inputs, ReduceOp op) {
  const int n = ctx.size();
  const int me = ctx.rank();
  const std::size_t bytes = output.bytes();
  char* tmp = ctx.scratch(bytes * static_cast<std::size_t>(std::max(n - 1, 1)));
  std::vector<RequestPtr> recvs;
  std::vector<RequestPtr> sends;
  for (int d = 1; d < n; ++d) {
    recvs.push_back(ctx.irecv(ctx.peer(-d), tmp + static_cast<std::size_t>(d - 1) * bytes, bytes));
  }
  for (int d = 1; d < n; ++d) {
    const int r = ctx.peer(d);
    const Buffer& to = inputs[static_cast<std::size_t>(r)];
    sends.push_back(ctx.isend(r, to.data(), to.bytes()));
  }
  const Buffer& own = inputs[static_cast<std::size_t>(me)];
  if (own.data() != output.data() && bytes) std::memmove(output.data(), own.data(), bytes);
  for (int d = 1; d < n; ++d) {
    ctx.wait(recvs[static_cast<std::size_t>(d - 1)]);
    reduce::reduce_into(output.dtype(), op, output.data(), tmp + static_cast<std::size_t>(d - 1) * bytes,
                        output.count());
  }
  ctx.wait(sends);
}

}  // namespace ctrun::comm::algorithms
