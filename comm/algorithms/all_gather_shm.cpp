// Shared-memory all_gather, pipelined (shm_pipeline.hpp): every rank copies piece k of its input into its slot
// k % slots and publishes it, and copies every peer's piece k into its output as soon as that peer published
// it (streaming stores for large outputs, reduce/copy.hpp), then releases piece k. A rank produces as far
// ahead as free slots allow before it waits for peers, and sleeps until all its peers have published the
// piece it needs: with more ranks than cores, each wake-up does a batch of work.
#include <algorithm>
#include <cstring>

#include "comm/algorithms/algorithms.hpp"
#include "comm/algorithms/shm_pipeline.hpp"
#include "comm/reduce/copy.hpp"

namespace ctrun::comm::algorithms {

void all_gather_shm(Context& ctx, const std::vector<Buffer>& outputs, Buffer input) {
  using WS = Pipeline::WS;
  const int n = ctx.size();
  // One rank, or too small to pipeline: the barrier variant (which also handles one rank).
  if (n == 1 || input.bytes() < ctx.workspace()->pipeline_bytes())
    return all_gather_shm_barrier(ctx, outputs, input);
  auto& ws = *ctx.workspace();
  const int me = ctx.rank();
  const std::size_t bytes = input.bytes();
  const auto* in = static_cast<const char*>(input.data());
  char* own = static_cast<char*>(outputs[static_cast<std::size_t>(me)].data());
  const std::size_t sb = ws.slot_bytes();
  Pipeline pl(ws, (bytes + sb - 1) / sb);
  const std::uint64_t signature = ctx.signature(bytes);
  const bool stream = bytes * static_cast<std::size_t>(n) >= ws.stream_bytes();
  auto piece = [&](std::uint64_t k) {
    const std::size_t off = static_cast<std::size_t>(k) * sb;
    return std::pair<std::size_t, std::size_t>{off, std::min(sb, bytes - std::min(bytes, off))};
  };
  if (own != in) reduce::copy_out(own, in, bytes, stream);
  // Peers whose piece `cons` this rank has not copied yet, starting after itself (ranks do not all read one
  // workspace at once).
  std::vector<int> todo;
  auto reset_todo = [&] {
    todo.clear();
    for (int i = 1; i < n; ++i) todo.push_back((me + i) % n);
  };
  reset_todo();
  std::vector<WS::Want> wants;
  std::uint64_t prod = 0;
  std::uint64_t cons = 0;
  // One step at a time: copy out what peers published, else produce the next piece (as far ahead as free slots
  // allow), else sleep until either can run. Until this rank has produced every piece too: peers may still
  // need them after it copied out all of theirs.
  while (cons < pl.count() || prod < pl.count()) {
    bool moved = false;
    if (cons < pl.count()) {
      const auto [off, len] = piece(cons);
      for (auto it = todo.begin(); it != todo.end();) {
        if (!pl.reached(*it, WS::kProduced, cons)) {
          ++it;
          continue;
        }
        pl.check(*it, cons, signature);
        reduce::copy_out(static_cast<char*>(outputs[static_cast<std::size_t>(*it)].data()) + off,
                         pl.slot(*it, cons), len, stream);
        it = todo.erase(it);
        moved = true;
      }
      if (todo.empty()) {
        pl.publish(WS::kReleased, cons);
        ++cons;
        reset_todo();
        continue;
      }
    }
    if (prod < pl.count() && pl.slot_free(prod)) {
      const auto [off, len] = piece(prod);
      if (len) std::memcpy(pl.slot(me, prod), in + off, len);
      pl.produce(prod, signature);
      ++prod;
      continue;
    }
    if (moved) continue;
    wants.clear();
    // All peers at once when several are missing: fewer wake-ups when ranks outnumber cores.
    if (cons < pl.count()) wants.push_back(pl.reached_want(todo.size() == 1 ? todo[0] : -1, WS::kProduced, cons));
    if (prod < pl.count()) wants.push_back(pl.slot_free_want(prod));
    pl.wait(wants, ctx.deadline());
  }
  if (stream) reduce::stream_fence();
  pl.finish();
}

}  // namespace ctrun::comm::algorithms
