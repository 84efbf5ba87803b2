// The barrier variant, which all_gather_shm.cpp runs below CTRUN_COMM_SHM_PIPELINE_BYTES (and reduce_scatter also
// with more ranks than cores), where it measured faster than the pipeline (docs/benchmarks.md).
// Shared-memory all_gather: every rank copies a piece of its input into its workspace, a barrier, then copies
// every other rank's piece out.
#include <algorithm>
#include <cstring>

#include "comm/algorithms/algorithms.hpp"

namespace ctrun::comm::algorithms {

void all_gather_shm_barrier(Context& ctx, const std::vector<Buffer>& outputs, Buffer input) {
  const int n = ctx.size();
  const int me = ctx.rank();
  const std::size_t bytes = input.bytes();
  const auto* in = static_cast<const char*>(input.data());
  char* own = static_cast<char*>(outputs[static_cast<std::size_t>(me)].data());
  if (own != in && bytes) std::memcpy(own, in, bytes);
  if (n == 1) return;
  // Empty: one barrier anyway, so a rank that passed a different size gets a mismatch error, not a timeout.
  if (bytes == 0) return ctx.workspace()->barrier(ctx.deadline(), ctx.signature(0));
  auto* ws = ctx.workspace();
  for (std::size_t off = 0; off < bytes; off += ws->part_bytes()) {
    const std::size_t len = std::min(ws->part_bytes(), bytes - off);
    const int h = ws->next_part();
    std::memcpy(ws->part(me, h), in + off, len);
    ws->barrier(ctx.deadline(), ctx.signature(bytes));
    for (int r = 0; r < n; ++r) {
      if (r != me)
        std::memcpy(static_cast<char*>(outputs[static_cast<std::size_t>(r)].data()) + off, ws->part(r, h), len);
    }
  }
}

}  // namespace ctrun::comm::algorithms
