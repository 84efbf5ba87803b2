// Shared-memory reduce_scatter, pipelined (shm_pipeline.hpp): every rank copies piece k of each of its n input
// blocks but its own into its slot k % slots (block j at j * piece) and publishes it; once every peer published
// piece k, rank r reduces block r's piece in rank order, its own contribution read straight from its input,
// into an L2-sized scratch, copies the result to its output (streaming stores for large outputs,
// reduce/copy.hpp; the scratch also makes an output that aliases the input safe) and releases piece k.
#include <algorithm>
#include <cstring>

#include "comm/algorithms/algorithms.hpp"
#include "comm/algorithms/shm_pipeline.hpp"
#include "comm/reduce/copy.hpp"
#include "comm/reduce/reduce.hpp"

namespace ctrun::comm::algorithms {

void reduce_scatter_shm(Context& ctx, Buffer output, const std::vector<Buffer>& inputs, ReduceOp op) {
  using WS = Pipeline::WS;
  const int n = ctx.size();
  // One rank, too small to pipeline, or more ranks than cores (where the barrier variant measured faster at
  // every size, docs/benchmarks.md): the barrier variant (which also handles one rank).
  if (n == 1 || ctx.workspace()->oversubscribed() ||
      output.bytes() * static_cast<std::size_t>(n) < ctx.workspace()->pipeline_bytes())
    return reduce_scatter_shm_barrier(ctx, output, inputs, op);
  auto& ws = *ctx.workspace();
  const int me = ctx.rank();
  const DataType dtype = output.dtype();
  const std::size_t es = element_size(dtype);
  char* out = static_cast<char*>(output.data());
  const std::size_t count = output.count();
  const std::size_t piece = std::max<std::size_t>(ws.slot_bytes() / (es * static_cast<std::size_t>(n)), 1);
  Pipeline pl(ws, (count + piece - 1) / piece);
  const std::uint64_t signature = ctx.signature(count);
  const bool stream = output.bytes() >= ws.stream_bytes();
  char* acc = ctx.scratch(piece * es);
  const char* own = static_cast<const char*>(inputs[static_cast<std::size_t>(me)].data());
  auto span = [&](std::uint64_t k) {
    const std::size_t off = static_cast<std::size_t>(k) * piece;
    return std::pair<std::size_t, std::size_t>{off, std::min(piece, count - std::min(count, off))};
  };
  std::vector<WS::Want> wants;
  std::uint64_t prod = 0;
  std::uint64_t cons = 0;
  // One step at a time: reduce the oldest piece once every peer published it, else produce the next (as far
  // ahead as free slots allow), else sleep until either can run. Until this rank has produced every piece too:
  // peers may still need them after it reduced all of its own.
  while (cons < pl.count() || prod < pl.count()) {
    if (cons < pl.count() && pl.reached(-1, WS::kProduced, cons)) {
      for (int r = 0; r < n; ++r) {
        if (r != me) pl.check(r, cons, signature);
      }
      const auto [off, len] = span(cons);
      if (len) {
        const std::size_t at = static_cast<std::size_t>(me) * piece * es;
        auto from = [&](int r) -> const char* { return r == me ? own + off * es : pl.slot(r, cons) + at; };
        reduce::reduce_to(dtype, op, acc, from(0), from(1), len);
        for (int r = 2; r < n; ++r) reduce::reduce_into(dtype, op, acc, from(r), len);
        reduce::copy_out(out + off * es, acc, len * es, stream);
      }
      pl.publish(WS::kReleased, cons);
      ++cons;
      continue;
    }
    if (prod < pl.count() && pl.slot_free(prod)) {
      const auto [off, len] = span(prod);
      for (int j = 0; j < n; ++j) {
        if (j == me || len == 0) continue;
        std::memcpy(pl.slot(me, prod) + static_cast<std::size_t>(j) * piece * es,
                    static_cast<const char*>(inputs[static_cast<std::size_t>(j)].data()) + off * es, len * es);
      }
      pl.produce(prod, signature);
      ++prod;
      continue;
    }
    wants.clear();
    if (cons < pl.count()) wants.push_back(pl.reached_want(-1, WS::kProduced, cons));
    if (prod < pl.count()) wants.push_back(pl.slot_free_want(prod));
    pl.wait(wants, ctx.deadline());
  }
  if (stream) reduce::stream_fence();
  pl.finish();
}

}  // namespace ctrun::comm::algorithms
