// Ring reduce_scatter: the first half of the ring all_reduce, reading each rank's contribution to block b from
// inputs[b] and accumulating partial results in scratch; the final block lands in the output.
#include "comm/algorithms/algorithms.hpp"
#include "comm/algorithms/ring_reduce_scatter.hpp"

namespace ctrun::comm::algorithms {

void reduce_scatter_ring(Context& ctx, Buffer output, const std::vector<Buffer>& inputs, ReduceOp op) {
  const int n = ctx.size();
  const std::size_t es = element_size(output.dtype());
  std::size_t scratch_bytes = 0;
  for (const auto& in : inputs) scratch_bytes += in.bytes();
  char* acc = ctx.scratch(scratch_bytes, 2);
  std::vector<RingBlock> blocks(static_cast<std::size_t>(n));
  for (int b = 0; b < n; ++b) {
    const Buffer& in = inputs[static_cast<std::size_t>(b)];
    char* dst = b == ctx.rank() ? static_cast<char*>(output.data()) : acc;
    blocks[static_cast<std::size_t>(b)] = {static_cast<const char*>(in.data()), dst, in.count()};
    acc += in.count() * es;
  }
  ring_reduce_scatter(ctx, blocks, output.dtype(), op, [](std::size_t, std::size_t) {});
}

}  // namespace ctrun::comm::algorithms
