// Two-level reduce_scatter: every rank packs its inputs and the host reduces them into its lowest rank (shared
// memory); the hosts' lowest ranks send each other host the blocks of that host's ranks and reduce what they
// receive into their own ranks' blocks; each then scatters the blocks to its host's ranks.
#include <cstring>

#include "comm/algorithms/two_level.hpp"
#include "comm/reduce/reduce.hpp"

namespace ctrun::comm::algorithms {

void two_level_reduce_scatter(Levels& lv, const OpArgs& args) {
  const auto& l = lv.layout();
  const auto& mine = l.hosts[static_cast<std::size_t>(lv.host())];
  const std::size_t n = l.host_of.size();
  const std::size_t count = args.buffer.count();
  const std::size_t block = args.buffer.bytes();
  const DataType dtype = args.buffer.dtype();
  char* packed = lv.pack(n * block);
  for (std::size_t r = 0; r < n; ++r) std::memcpy(packed + r * block, args.inputs[r].data(), block);
  lv.run_local(OpKind::kReduce, {.buffer = Buffer(packed, n * count, dtype), .root = 0, .op = args.op});

  if (lv.local_rank() == 0) {
    const std::vector<int> reps = lv.representatives();
    Context cross = lv.cross_context(reps);
    char* staged = lv.pack(static_cast<std::size_t>(lv.host_count() - 1) * mine.size() * block, 1);
    std::vector<RequestPtr> receives;
    std::vector<RequestPtr> sends;
    std::size_t at = 0;
    for (int h = 0; h < lv.host_count(); ++h) {
      if (h == lv.host()) continue;
      for (std::size_t i = 0; i < mine.size(); ++i, at += block) receives.push_back(cross.irecv(h, staged + at, block));
      for (int r : l.hosts[static_cast<std::size_t>(h)]) {
        sends.push_back(cross.isend(h, packed + static_cast<std::size_t>(r) * block, block));
      }
    }
    at = 0;
    std::size_t k = 0;
    for (int h = 0; h < lv.host_count(); ++h) {
      if (h == lv.host()) continue;
      for (int r : mine) {
        cross.wait(receives[k++]);
        reduce::reduce_into(dtype, args.op, packed + static_cast<std::size_t>(r) * block, staged + at, count);
        at += block;
      }
    }
    cross.wait(sends);
  }
  std::vector<Buffer> blocks;
  if (lv.local_rank() == 0) {
    for (int r : mine) blocks.push_back(Buffer(packed + static_cast<std::size_t>(r) * block, count, dtype));
  }
  if (lv.local_size() == 1) {
    std::memcpy(args.buffer.data(), packed + static_cast<std::size_t>(lv.rank()) * block, block);
    return;
  }
  lv.run_local(OpKind::kScatter, {.buffer = args.buffer, .inputs = std::move(blocks), .root = 0});
}

}  // namespace ctrun::comm::algorithms
