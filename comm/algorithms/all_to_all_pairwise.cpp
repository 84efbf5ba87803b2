// All-to-all: at distance d each rank sends to rank+d and receives from rank-d; everything is posted at once
// and the transports interleave it. Handles uneven splits (per-pair sizes come from the buffers).
#include <cstring>

#include "comm/algorithms/algorithms.hpp"

namespace ctrun::comm::algorithms {

void all_to_all_pairwise(Context& ctx, const std::vector<Buffer>& outputs, const std::vector<Buffer>& inputs) {
  const int n = ctx.size();
  const int me = ctx.rank();
  std::vector<RequestPtr> requests;
  for (int d = 1; d < n; ++d) {
    const int from = ctx.peer(-d);
    const Buffer& out = outputs[static_cast<std::size_t>(from)];
    requests.push_back(ctx.irecv(from, out.data(), out.bytes()));
  }
  for (int d = 1; d < n; ++d) {
    const int to = ctx.peer(d);
    const Buffer& in = inputs[static_cast<std::size_t>(to)];
    requests.push_back(ctx.isend(to, in.data(), in.bytes()));
  }
  const Buffer& in = inputs[static_cast<std::size_t>(me)];
  const Buffer& out = outputs[static_cast<std::size_t>(me)];
  if (in.bytes() && in.data() != out.data()) std::memmove(out.data(), in.data(), in.bytes());
  ctx.wait(requests);
}

}  // namespace ctrun::comm::algorithms
