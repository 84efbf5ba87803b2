// Ring all_gather: n-1 steps, each rank forwards the block it received in the previous step; chunks are
// forwarded as they arrive. Each rank sends and receives (n-1)/n of the output: bandwidth-optimal.
// Blocks may differ in size (the list form allows it as long as all ranks agree).
#include <algorithm>
#include <cstring>

#include "comm/algorithms/algorithms.hpp"

namespace ctrun::comm::algorithms {

void all_gather_ring(Context& ctx, const std::vector<Buffer>& outputs, Buffer input) {
  const int n = ctx.size();
  const int me = ctx.rank();
  Buffer own = outputs[static_cast<std::size_t>(me)];
  if (own.data() != input.data() && input.bytes()) std::memcpy(own.data(), input.data(), input.bytes());
  if (n == 1) return;
  const auto mod = [n](int v) { return ((v % n) + n) % n; };
  const std::size_t chunk = std::max<std::size_t>(ctx.chunk_bytes(), 1);
  const int left = ctx.peer(-1);
  const int right = ctx.peer(1);
  // Outputs are distinct and each block is sent only after it was received: every receive can be posted now.
  std::vector<std::vector<RequestPtr>> recvs(static_cast<std::size_t>(n - 1));
  for (int t = 0; t < n - 1; ++t) {
    const Buffer& b = outputs[static_cast<std::size_t>(mod(me - t - 1))];
    char* p = static_cast<char*>(b.data());
    for (std::size_t off = 0; off < b.bytes(); off += chunk) {
      recvs[static_cast<std::size_t>(t)].push_back(ctx.irecv(left, p + off, std::min(chunk, b.bytes() - off)));
    }
  }
  std::vector<RequestPtr> sends;
  const char* mine = static_cast<const char*>(input.data());
  for (std::size_t off = 0; off < input.bytes(); off += chunk) {
    sends.push_back(ctx.isend(right, mine + off, std::min(chunk, input.bytes() - off)));
  }
  for (int t = 0; t < n - 1; ++t) {
    const Buffer& b = outputs[static_cast<std::size_t>(mod(me - t - 1))];
    const char* p = static_cast<const char*>(b.data());
    std::size_t c = 0;
    for (std::size_t off = 0; off < b.bytes(); off += chunk, ++c) {
      ctx.wait(recvs[static_cast<std::size_t>(t)][c]);
      if (t < n - 2) sends.push_back(ctx.isend(right, p + off, std::min(chunk, b.bytes() - off)));
    }
  }
  ctx.wait(sends);
}

}  // namespace ctrun::comm::algorithms
