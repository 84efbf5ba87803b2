// Two-level all_gather: all_gather inside each host (shared memory); the hosts' lowest ranks send their host's
// blocks to each other (every block crosses the network once per other host) straight into one packed buffer,
// which each broadcasts inside its host; every rank unpacks the other hosts' blocks from it.
#include <cstring>

#include "comm/algorithms/two_level.hpp"

namespace ctrun::comm::algorithms {

void two_level_all_gather(Levels& lv, const OpArgs& args) {
  const auto& l = lv.layout();
  const auto& mine = l.hosts[static_cast<std::size_t>(lv.host())];
  std::vector<Buffer> local_outputs;
  for (int r : mine) local_outputs.push_back(args.outputs[static_cast<std::size_t>(r)]);
  lv.run_local(OpKind::kAllGather, {.buffer = args.buffer, .outputs = std::move(local_outputs)});

  const std::size_t block = args.buffer.bytes();
  const std::size_t others = l.host_of.size() - mine.size();
  if (block == 0 || others == 0) return;
  char* packed = lv.pack(others * block);
  if (lv.local_rank() == 0) {
    const std::vector<int> reps = lv.representatives();
    Context cross = lv.cross_context(reps);
    std::vector<RequestPtr> requests;
    std::size_t at = 0;
    for (int h = 0; h < lv.host_count(); ++h) {
      if (h == lv.host()) continue;
      for (std::size_t i = 0; i < l.hosts[static_cast<std::size_t>(h)].size(); ++i, at += block) {
        requests.push_back(cross.irecv(h, packed + at, block));
      }
      for (int r : mine) requests.push_back(cross.isend(h, args.outputs[static_cast<std::size_t>(r)].data(), block));
    }
    cross.wait(requests);
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
