// Shared-memory all_gather, direct: every rank publishes its input's address, a barrier, then copies each peer's
// input straight into its output (one copy per byte, process_vm_readv), a barrier so no peer still reads this
// rank's input when it returns. Two barriers per op at any size.
#include <cstring>

#include "comm/algorithms/algorithms.hpp"
#include "comm/algorithms/peer_buffers.hpp"

namespace ctrun::comm::algorithms {

void all_gather_shm_direct(Context& ctx, const std::vector<Buffer>& outputs, Buffer input) {
  const int n = ctx.size();
  const int me = ctx.rank();
  const std::size_t bytes = input.bytes();
  char* own = static_cast<char*>(outputs[static_cast<std::size_t>(me)].data());
  if (own != input.data() && bytes) std::memcpy(own, input.data(), bytes);
  if (n == 1) return;
  auto& ws = *ctx.workspace();
  if (bytes == 0) return ws.barrier(ctx.deadline(), ctx.signature(0));
  const std::uint64_t signature = ctx.signature(bytes);
  PeerBuffers peers(ws, me, {input.data()});
  ws.barrier(ctx.deadline(), signature);
  // Start at the next rank: ranks read different peers at the same moment.
  for (int d = 1; d < n; ++d) {
    const int r = ctx.peer(d);
    peers.read(r, 0, 0, outputs[static_cast<std::size_t>(r)].data(), bytes);
  }
  ws.barrier(ctx.deadline(), signature);
}

}  // namespace ctrun::comm::algorithms
