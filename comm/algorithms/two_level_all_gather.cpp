// Two-level all_gather: all_gather inside each host (shared memory); the hosts' lowest ranks all_gather their
// hosts' blocks among themselves (the cross level's algorithm, each host's blocks as one block: every block
// crosses the network once per other host) into one packed buffer, which each broadcasts inside its host; every
// rank unpacks the other hosts' blocks from it.
#include <cstring>

#include "comm/algorithms/two_level.hpp"

namespace ctrun::comm::algorithms {
namespace {

// The outputs of `ranks` as one buffer when they lie back to back in memory (all_gather_into's views of one
// tensor, ranks of a host numbered in a row), else an empty Buffer.
Buffer one_run(const std::vector<Buffer>& outputs, const std::vector<int>& ranks) {
  const Buffer& first = outputs[static_cast<std::size_t>(ranks[0])];
  const char* start = static_cast<const char*>(first.data());
  for (std::size_t i = 1; i < ranks.size(); ++i) {
    if (outputs[static_cast<std::size_t>(ranks[i])].data() != start + i * first.bytes()) return {};
  }
  return Buffer(first.data(), first.count() * ranks.size(), first.dtype());
}

}  // namespace

void two_level_all_gather(Levels& lv, const OpArgs& args) {
  const auto& l = lv.layout();
  const auto& mine = l.hosts[static_cast<std::size_t>(lv.host())];
  std::vector<Buffer> local_outputs;
  for (int r : mine) local_outputs.push_back(args.outputs[static_cast<std::size_t>(r)]);
  lv.run_local(OpKind::kAllGather, {.buffer = args.buffer, .outputs = std::move(local_outputs)});

  const std::size_t block = args.buffer.bytes();
  const std::size_t others = l.host_of.size() - mine.size();
  if (block == 0 || others == 0) return;
  const std::size_t count = args.buffer.count();
  const DataType dtype = args.buffer.dtype();
  // The other hosts' blocks in host order; after them, on the lowest rank, this host's blocks where its outputs
  // are not one run of memory (the cross step sends a host's blocks as one message).
  Buffer own = lv.local_rank() == 0 ? one_run(args.outputs, mine) : Buffer();
  const bool pack_own = lv.local_rank() == 0 && own.data() == nullptr;
  char* packed = lv.pack((others + (pack_own ? mine.size() : 0)) * block);
  if (lv.local_rank() == 0) {
    if (pack_own) {
      own = Buffer(packed + others * block, mine.size() * count, dtype);
      for (std::size_t i = 0; i < mine.size(); ++i) {
        std::memcpy(packed + (others + i) * block, args.outputs[static_cast<std::size_t>(mine[i])].data(), block);
      }
    }
    std::vector<Buffer> hosts;  // each host's blocks, by host index
    std::size_t at = 0;
    for (int h = 0; h < lv.host_count(); ++h) {
      const std::size_t blocks = l.hosts[static_cast<std::size_t>(h)].size();
      if (h == lv.host()) {
        hosts.push_back(own);
        continue;
      }
      hosts.emplace_back(packed + at, blocks * count, dtype);
      at += blocks * block;
    }
    lv.run_cross(OpKind::kAllGather, {.buffer = own, .outputs = std::move(hosts)}, lv.representatives());
  }
  if (lv.local_size() > 1) {
    lv.run_local(OpKind::kBroadcast, {.buffer = Buffer(packed, others * block, DataType::kUInt8), .root = 0});
  }
  std::size_t at = 0;
  for (int h = 0; h < lv.host_count(); ++h) {
    if (h == lv.host()) continue;
    for (int r : l.hosts[static_cast<std::size_t>(h)]) {
      std::memcpy(args.outputs[static_cast<std::size_t>(r)].data(), packed + at, block);
      at += block;
    }
  }
}

}  // namespace ctrun::comm::algorithms
