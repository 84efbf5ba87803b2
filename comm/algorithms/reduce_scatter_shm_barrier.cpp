// The barrier variant, which reduce_scatter_shm.cpp runs below CTRUN_COMM_SHM_PIPELINE_BYTES (and reduce_scatter also
// with more ranks than cores), where it measured faster than the pipeline (docs/benchmarks.md).
// Shared-memory reduce_scatter: every rank copies a piece of each of its n input blocks into its workspace
// (block j at j * piece), a barrier, then rank r reduces block r over all workspaces in rank order.
#include <algorithm>
#include <cstring>

#include "comm/algorithms/algorithms.hpp"
#include "comm/reduce/reduce.hpp"

namespace ctrun::comm::algorithms {

void reduce_scatter_shm_barrier(Context& ctx, Buffer output, const std::vector<Buffer>& inputs, ReduceOp op) {
  const int n = ctx.size();
  const int me = ctx.rank();
  const DataType dtype = output.dtype();
  const std::size_t es = element_size(dtype);
  char* out = static_cast<char*>(output.data());
  if (n == 1) {
    if (output.bytes() && inputs[0].data() != out) std::memmove(out, inputs[0].data(), output.bytes());
    return;
  }
  // Empty: one barrier anyway, so a rank that passed a different size gets a mismatch error, not a timeout.
  if (output.empty()) return ctx.workspace()->barrier(ctx.deadline(), ctx.signature(0));
  auto* ws = ctx.workspace();
  const std::size_t piece = std::max<std::size_t>(ws->part_bytes() / (es * static_cast<std::size_t>(n)), 1);
  for (std::size_t off = 0; off < output.count(); off += piece) {
    const std::size_t len = std::min(piece, output.count() - off);
    const int h = ws->next_part();
    for (int j = 0; j < n; ++j) {
      std::memcpy(ws->part(me, h) + static_cast<std::size_t>(j) * piece * es,
                  static_cast<const char*>(inputs[static_cast<std::size_t>(j)].data()) + off * es, len * es);
    }
    ws->barrier(ctx.deadline(), ctx.signature(output.count()));
    const std::size_t at = static_cast<std::size_t>(me) * piece * es;
    reduce::reduce_to(dtype, op, out + off * es, ws->part(0, h) + at, ws->part(1, h) + at, len);
    for (int r = 2; r < n; ++r) reduce::reduce_into(dtype, op, out + off * es, ws->part(r, h) + at, len);
  }
}

}  // namespace ctrun::comm::algorithms
