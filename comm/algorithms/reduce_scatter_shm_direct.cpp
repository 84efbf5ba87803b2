// Shared-memory reduce_scatter, direct: every rank publishes the addresses of its n input blocks, a barrier, then
// rank r reduces block r chunk by chunk straight out of every rank's inputs[r] in rank order (its own in place,
// peers' through process_vm_readv into an L2-sized scratch) into its output, a barrier so no peer still reads
// this rank's inputs when it returns. Two barriers per op at any size; one copy of each peer byte.
#include <algorithm>
#include <cstring>

#include "comm/algorithms/algorithms.hpp"
#include "comm/algorithms/peer_buffers.hpp"
#include "comm/reduce/reduce.hpp"

namespace ctrun::comm::algorithms {

void reduce_scatter_shm_direct(Context& ctx, Buffer output, const std::vector<Buffer>& inputs, ReduceOp op) {
  const int n = ctx.size();
  const int me = ctx.rank();
  char* out = static_cast<char*>(output.data());
  if (n == 1) {
    if (output.bytes() && inputs[0].data() != out) std::memmove(out, inputs[0].data(), output.bytes());
    return;
  }
  auto& ws = *ctx.workspace();
  if (output.empty()) return ws.barrier(ctx.deadline(), ctx.signature(0));
  if (!PeerBuffers::fits(ws, static_cast<std::size_t>(n))) return reduce_scatter_shm(ctx, output, inputs, op);
  const DataType dtype = output.dtype();
  const std::size_t es = element_size(dtype);
  const std::uint64_t signature = ctx.signature(output.count());
  std::vector<const void*> blocks;
  for (const auto& b : inputs) blocks.push_back(b.data());
  PeerBuffers peers(ws, me, blocks);
  ws.barrier(ctx.deadline(), signature);

  const auto* own = static_cast<const char*>(inputs[static_cast<std::size_t>(me)].data());
  const std::size_t chunk = chunk_elements(ctx.chunk_bytes(), es);
  const std::size_t scratch = std::min(chunk, output.count()) * es;
  char* acc = ctx.scratch(scratch, 0);
  char* tmp = ctx.scratch(scratch, 1);
  for (std::size_t off = 0; off < output.count(); off += chunk) {
    const std::size_t len = std::min(chunk, output.count() - off);
    for (int q = 0; q < n; ++q) {
      const char* src = own + off * es;
      if (q != me) {
        peers.read(q, static_cast<std::size_t>(me), off * es, q == 0 ? acc : tmp, len * es);
        src = q == 0 ? acc : tmp;
      }
      if (q == 0) {
        if (src != acc) std::memcpy(acc, src, len * es);
      } else {
        reduce::reduce_into(dtype, op, acc, src, len);
      }
    }
    std::memcpy(out + off * es, acc, len * es);
  }
  ws.barrier(ctx.deadline(), signature);
}

}  // namespace ctrun::comm::algorithms
