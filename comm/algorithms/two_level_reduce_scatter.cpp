// Two-level reduce_scatter: every rank packs its inputs host by host (each host's ranks' blocks in a row) and the
// host reduces them into its lowest rank (shared memory); the hosts' lowest ranks reduce_scatter those runs among
// themselves (the cross level's algorithm, each host's blocks as one block: every other host sends it the blocks
// of its ranks), then each scatters its host's blocks to its ranks.
#include <cstring>

#include "comm/algorithms/two_level.hpp"

namespace ctrun::comm::algorithms {

void two_level_reduce_scatter(Levels& lv, const OpArgs& args) {
  const auto& l = lv.layout();
  const auto& mine = l.hosts[static_cast<std::size_t>(lv.host())];
  const std::size_t n = l.host_of.size();
  const std::size_t count = args.buffer.count();
  const std::size_t block = args.buffer.bytes();
  const DataType dtype = args.buffer.dtype();
  char* packed = lv.pack(n * block);
  std::vector<Buffer> hosts;  // each host's blocks in `packed`, by host index
  std::size_t at = 0;
  for (const auto& ranks : l.hosts) {
    hosts.emplace_back(packed + at, ranks.size() * count, dtype);
    for (int r : ranks) {
      std::memcpy(packed + at, args.inputs[static_cast<std::size_t>(r)].data(), block);
      at += block;
    }
  }
  lv.run_local(OpKind::kReduce, {.buffer = Buffer(packed, n * count, dtype), .root = 0, .op = args.op});

  const Buffer own = hosts[static_cast<std::size_t>(lv.host())];
  if (lv.local_rank() == 0) {
    lv.run_cross(OpKind::kReduceScatter, {.buffer = own, .inputs = hosts, .op = args.op}, lv.representatives());
  }
  char* const first = static_cast<char*>(own.data());
  if (lv.local_size() == 1) {
    std::memcpy(args.buffer.data(), first, block);
    return;
  }
  std::vector<Buffer> blocks;
  if (lv.local_rank() == 0) {
    for (std::size_t i = 0; i < mine.size(); ++i) blocks.emplace_back(first + i * block, count, dtype);
  }
  lv.run_local(OpKind::kScatter, {.buffer = args.buffer, .inputs = std::move(blocks), .root = 0});
}

}  // namespace ctrun::comm::algorithms
