// Direct all_gather: every rank sends its input to every other rank at once. One step of latency; n-1 copies
// of the input leave each rank, so it is for small messages only. Blocks may differ in size as long as all ranks
// agree (a two-level group's cross step: each host's ranks' blocks).
#include <cstring>

#include "comm/algorithms/algorithms.hpp"

namespace ctrun::comm::algorithms {

void all_gather_direct(Context& ctx, const std::vector<Buffer>& outputs, Buffer input) {
  const int n = ctx.size();
  const int me = ctx.rank();
  Buffer own = outputs[static_cast<std::size_t>(me)];
  if (own.data() != input.data() && input.bytes()) std::memcpy(own.data(), input.data(), input.bytes());
  std::vector<RequestPtr> requests;
  for (int d = 1; d < n; ++d) {
    const int from = ctx.peer(-d);
    requests.push_back(ctx.irecv(from, outputs[static_cast<std::size_t>(from)].data(),
                                 outputs[static_cast<std::size_t>(from)].bytes()));
  }
  for (int d = 1; d < n; ++d) requests.push_back(ctx.isend(ctx.peer(d), input.data(), input.bytes()));
  ctx.wait(requests);
}

}  // namespace ctrun::comm::algorithms
