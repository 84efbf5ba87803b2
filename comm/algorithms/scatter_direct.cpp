// Direct scatter: the root posts one send per rank at once; the others receive their chunk.
#include <cstring>

#include "comm/algorithms/algorithms.hpp"

namespace ctrun::comm::algorithms {

void scatter_direct(Context& ctx, Buffer output, const std::vector<Buffer>& inputs, int root) {
  const int me = ctx.rank();
  if (me != root) {
    ctx.recv(root, output.data(), output.bytes());
    return;
  }
  std::vector<RequestPtr> sends;
  for (int d = 1; d < ctx.size(); ++d) {
    const int r = ctx.peer(d);
    sends.push_back(
        ctx.isend(r, inputs[static_cast<std::size_t>(r)].data(), inputs[static_cast<std::size_t>(r)].bytes()));
  }
  const Buffer& own = inputs[static_cast<std::size_t>(me)];
  if (own.data() != output.data() && own.bytes()) std::memcpy(output.data(), own.data(), own.bytes());
  ctx.wait(sends);
}

}  // namespace ctrun::comm::algorithms
