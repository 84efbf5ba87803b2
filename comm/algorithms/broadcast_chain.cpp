// Pipelined chain broadcast: root -> root+1 -> ... ; each chunk is forwarded as soon as it arrives, so for
// large messages the time approaches one message transfer regardless of n.
#include <algorithm>

#include "comm/algorithms/algorithms.hpp"

namespace ctrun::comm::algorithms {

void broadcast_chain(Context& ctx, Buffer buffer, int root) {
  const int n = ctx.size();
  if (n == 1 || buffer.empty()) return;
  const int vrank = (ctx.rank() - root + n) % n;
  const int prev = (ctx.rank() - 1 + n) % n;
  const int next = (ctx.rank() + 1) % n;
  const bool last = vrank == n - 1;
  char* data = static_cast<char*>(buffer.data());
  const std::size_t bytes = buffer.bytes();
  const std::size_t chunk = std::max<std::size_t>(ctx.chunk_bytes(), 1);
  std::vector<RequestPtr> sends;
  if (vrank == 0) {
    for (std::size_t off = 0; off < bytes; off += chunk) {
      sends.push_back(ctx.isend(next, data + off, std::min(chunk, bytes - off)));
    }
    ctx.wait(sends);
    return;
  }
  std::vector<RequestPtr> recvs;
  for (std::size_t off = 0; off < bytes; off += chunk) {
    recvs.push_back(ctx.irecv(prev, data + off, std::min(chunk, bytes - off)));
  }
  std::size_t c = 0;
  for (std::size_t off = 0; off < bytes; off += chunk, ++c) {
    ctx.wait(recvs[c]);
    if (!last) sends.push_back(ctx.isend(next, data + off, std::min(chunk, bytes - off)));
  }
  ctx.wait(sends);
}

}  // namespace ctrun::comm::algorithms
