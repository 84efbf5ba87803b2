// Shared-memory broadcast, direct: the root publishes its buffer's address, a barrier, every other rank copies it
// straight out of the root's buffer (one copy per byte), a barrier before the root may return. Two barriers.
#include "comm/algorithms/algorithms.hpp"
#include "comm/algorithms/peer_buffers.hpp"

namespace ctrun::comm::algorithms {

void broadcast_shm_direct(Context& ctx, Buffer buffer, int root) {
  if (ctx.size() == 1) return;
  auto& ws = *ctx.workspace();
  if (buffer.empty()) return ws.barrier(ctx.deadline(), ctx.signature(0));
  const std::uint64_t signature = ctx.signature(buffer.bytes());
  PeerBuffers peers(ws, ctx.rank(), {buffer.data()});
  ws.barrier(ctx.deadline(), signature);
  if (ctx.rank() != root) peers.read(root, 0, 0, buffer.data(), buffer.bytes());
  ws.barrier(ctx.deadline(), signature);
}

}  // namespace ctrun::comm::algorithms
