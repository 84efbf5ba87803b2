// Shared-memory broadcast, pipelined (shm_pipeline.hpp): the root copies piece k of its buffer into its slot
// k % slots and publishes it; every other rank copies each piece out as soon as it is published (streaming
// stores for large buffers, reduce/copy.hpp) and releases it. The root waits only when it is a whole ring of
// slots ahead of the slowest receiver, so its copy-in overlaps the receivers' copy-out. At the end every rank
// waits until all are done (a receiver that ran another op or size names the mismatch and aborts the group,
// which the others then report too).
#include <algorithm>
#include <cstring>

#include "comm/algorithms/algorithms.hpp"
#include "comm/algorithms/shm_pipeline.hpp"
#include "comm/reduce/copy.hpp"

namespace ctrun::comm::algorithms {

void broadcast_shm(Context& ctx, Buffer buffer, int root) {
  // One rank or too small to pipeline: the barrier variant (which also handles one rank).
  if (ctx.size() == 1 || buffer.bytes() < ctx.workspace()->pipeline_bytes())
    return broadcast_shm_barrier(ctx, buffer, root);
  auto& ws = *ctx.workspace();
  char* data = static_cast<char*>(buffer.data());
  const std::size_t bytes = buffer.bytes();
  const std::size_t sb = ws.slot_bytes();
  Pipeline pl(ws, (bytes + sb - 1) / sb);
  // The root is part of the signature: ranks that disagree on it fail instead of copying garbage.
  const std::uint64_t signature = ctx.signature(bytes) ^ (static_cast<std::uint64_t>(root) + 1) * 0xff51afd7ed558ccdull;
  const bool stream = bytes >= ws.stream_bytes();
  auto piece = [&](std::uint64_t k) {
    const std::size_t off = static_cast<std::size_t>(k) * sb;
    return std::pair<std::size_t, std::size_t>{off, std::min(sb, bytes - std::min(bytes, off))};
  };
  if (ctx.rank() == root) {
    for (std::uint64_t k = 0; k < pl.count(); ++k) {
      if (!pl.slot_free(k)) pl.wait({pl.slot_free_want(k)}, ctx.deadline());
      const auto [off, len] = piece(k);
      if (len) std::memcpy(pl.slot(root, k), data + off, len);
      pl.produce(k, signature);
    }
    pl.publish(Pipeline::WS::kReleased, pl.count() - 1);
  } else {
    for (std::uint64_t k = 0; k < pl.count(); ++k) {
      if (!pl.reached(root, Pipeline::WS::kProduced, k))
        pl.wait({pl.reached_want(root, Pipeline::WS::kProduced, k)}, ctx.deadline());
      pl.check(root, k, signature);
      const auto [off, len] = piece(k);
      reduce::copy_out(data + off, pl.slot(root, k), len, stream);
      pl.publish(Pipeline::WS::kReleased, k);
    }
    if (stream) reduce::stream_fence();
  }
  // Every rank waits until every other is done: only receivers compare signatures (with the root's), and a
  // receiver that ran another op or size aborts the group, which the others then report as well.
  const std::uint64_t last = pl.count() - 1;
  if (!pl.reached(-1, Pipeline::WS::kReleased, last))
    pl.wait({pl.reached_want(-1, Pipeline::WS::kReleased, last)}, ctx.deadline());
  pl.finish();
}

}  // namespace ctrun::comm::algorithms
