// Direct gather: every rank sends to the root, which posts all receives at once (the root's link is the
// bottleneck whatever the algorithm, so a tree would only add latency).
#include <cstring>

#include "comm/algorithms/algorithms.hpp"

namespace ctrun::comm::algorithms {

void gather_direct(Context& ctx, const std::vector<Buffer>& outputs, Buffer input, int root) {
  const int me = ctx.rank();
  if (me != root) {
    ctx.send(root, input.data(), input.bytes());
    return;
  }
  Buffer own = outputs[static_cast<std::size_t>(me)];
  if (own.data() != input.data() && input.bytes()) std::memcpy(own.data(), input.data(), input.bytes());
  std::vector<RequestPtr> recvs;
  for (int r = 0; r < ctx.size(); ++r) {
    if (r != me)
      recvs.push_back(
          ctx.irecv(r, outputs[static_cast<std::size_t>(r)].data(), outputs[static_cast<std::size_t>(r)].bytes()));
  }
  ctx.wait(recvs);
}

}  // namespace ctrun::comm::algorithms
