// The barrier variant, which broadcast_shm.cpp runs below CTRUN_COMM_SHM_PIPELINE_BYTES (and reduce_scatter also
// with more ranks than cores), where it measured faster than the pipeline (docs/benchmarks.md).
// Shared-memory broadcast: the root copies a piece into its workspace, a barrier, everyone copies it out.
#include <algorithm>
#include <cstring>

#include "comm/algorithms/algorithms.hpp"

namespace ctrun::comm::algorithms {

void broadcast_shm_barrier(Context& ctx, Buffer buffer, int root) {
  if (ctx.size() == 1) return;
  // Empty: one barrier anyway, so a rank that passed a different size gets a mismatch error, not a timeout.
  if (buffer.empty()) return ctx.workspace()->barrier(ctx.deadline(), ctx.signature(0));
  auto* ws = ctx.workspace();
  char* data = static_cast<char*>(buffer.data());
  const std::size_t bytes = buffer.bytes();
  for (std::size_t off = 0; off < bytes; off += ws->part_bytes()) {
    const std::size_t len = std::min(ws->part_bytes(), bytes - off);
    const int h = ws->next_part();
    if (ctx.rank() == root) std::memcpy(ws->part(root, h), data + off, len);
    ws->barrier(ctx.deadline(), ctx.signature(bytes));
    if (ctx.rank() != root) std::memcpy(data + off, ws->part(root, h), len);
  }
}

}  // namespace ctrun::comm::algorithms
