// Every op x dtype x reduce op x size, for world sizes 1..8, both transports and both algorithm families,
// against the sequential reference (reference.hpp). Ranks are threads over one MemoryStore.
#include <gtest/gtest.h>

#include <cstdlib>
#include <sstream>

#include "checks.hpp"
#include "harness.hpp"

namespace ctrun::comm::testing {
namespace {

// The two families: bandwidth algorithms (ring, chains) and latency algorithms (doubling, trees, direct).
const char* const kRingFamily = "all_reduce=ring,broadcast=chain,reduce=chain,all_gather=ring,reduce_scatter=ring";
const char* const kTreeFamily =
    "all_reduce=recursive_doubling,broadcast=tree,reduce=tree,all_gather=direct,reduce_scatter=direct";
// Reduce-scatter by recursive halving + all-gather by recursive doubling (the only op it implements).
const char* const kHalvingFamily = "all_reduce=halving_doubling";

struct Param {
  std::string transport;
  int world;
  std::string family;
};

class Collectives : public ::testing::TestWithParam<Param> {};

TEST_P(Collectives, MatchTheSequentialReference) {
  const Param& p = GetParam();
  ProcessGroupOptions options;
  options.transport = p.transport;
  // "shm", "shm_direct": the shared-memory algorithms where the transport has them, the size table elsewhere.
  options.algorithm = p.family == "ring"      ? kRingFamily
                      : p.family == "tree"    ? kTreeFamily
                      : p.family == "halving" ? kHalvingFamily
                                              : p.family;
  options.timeout = std::chrono::seconds(60);
  options.settings = kSmallChunks;
  if (p.family == "shm_tight") {
    // The pipelined shm algorithms with 1 KiB slots, 1 to 3 of them (every slot reused many times within an op
    // and across ops), and streaming stores at every size.
    options.algorithm = "shm";
    options.settings["CTRUN_COMM_SHM_WORKSPACE_BYTES"] = "1024";
    options.settings["CTRUN_COMM_SHM_SLOTS"] = std::to_string(1 + p.world % 3);
    options.settings["CTRUN_COMM_SHM_STREAM_BYTES"] = "0";
    // As if every rank had a core of its own: the pipelined all_reduce at every world size (the default family
    // runs the barrier variant wherever ranks outnumber this machine's cores).
    options.settings["CTRUN_COMM_SHM_CORES"] = "64";
    options.settings["CTRUN_COMM_SHM_PIPELINE_BYTES"] = "0";
  }
  run_ranks(p.world, options, [&](int rank, ProcessGroup& pg) {
    int seed = 0;
    check_all_reduce_and_reduce(rank, p.world, pg, seed);
    check_reduce_scatter(rank, p.world, pg, seed);
    check_data_movement(rank, p.world, pg, seed);
    check_point_to_point(rank, p.world, pg, seed);
  });
}

std::vector<Param> all_params() {
  std::vector<Param> out;
  for (const char* transport : {"shm", "tcp"}) {
    for (int world = 1; world <= 8; ++world) {
      for (const char* family : {"ring", "tree", "halving", "shm"}) out.push_back({transport, world, family});
      if (std::string(transport) == "shm") {
        out.push_back({transport, world, "shm_direct"});
        out.push_back({transport, world, "shm_tight"});
      }
    }
  }
  return out;
}

INSTANTIATE_TEST_SUITE_P(AllOps, Collectives, ::testing::ValuesIn(all_params()),
                         [](const ::testing::TestParamInfo<Param>& info) {
                           return info.param.transport + "_world" + std::to_string(info.param.world) + "_" +
                                  info.param.family;
                         });

// The pipelined shm algorithms run ahead of each other by up to a ring of slots, also across ops: a long random
// sequence of different ops and sizes (the same on every rank), each checked, with 2 slots of 1 KiB so that
// slots are reused within and across ops while peers are still reading the previous ones.
TEST(ShmPipeline, BackToBackOpsOfDifferentSizesAndKinds) {
  for (int world = 2; world <= 8; ++world) {
    ProcessGroupOptions options;
    options.transport = "shm";
    options.algorithm = "shm";
    options.timeout = std::chrono::seconds(60);
    options.settings = {{"CTRUN_COMM_SHM_WORKSPACE_BYTES", "1024"},
                        {"CTRUN_COMM_SHM_SLOTS", world % 2 ? "3" : "2"},
                        {"CTRUN_COMM_SHM_STREAM_BYTES", world % 2 ? "0" : "4096"},
                        {"CTRUN_COMM_SHM_CORES", world % 3 ? "64" : "1"},
                        {"CTRUN_COMM_SHM_PIPELINE_BYTES", world % 4 ? "0" : "2048"}};
    run_ranks(world, options, [&](int rank, ProcessGroup& pg) {
      const std::size_t sizes[] = {0, 1, 5, 255, 256, 257, 3001, 20000};
      const std::size_t n = static_cast<std::size_t>(world);
      for (int step = 0; step < 48; ++step) {
        const std::size_t count = sizes[static_cast<std::size_t>(step * 7 + world) % std::size(sizes)];
        const auto v = [&](int r, std::size_t i) { return static_cast<std::int32_t>((r + 1) * 1000 + i % 997 + step); };
        std::vector<std::int32_t> a(count);
        std::vector<std::int32_t> out;
        switch (step % 4) {
          case 0:  // all_reduce
            for (std::size_t i = 0; i < count; ++i) a[i] = v(rank, i);
            pg.all_reduce(a);
            for (std::size_t i = 0; i < count; ++i) {
              std::int32_t want = 0;
              for (int r = 0; r < world; ++r) want += v(r, i);
              ASSERT_EQ(a[i], want) << "all_reduce step " << step << " count " << count << " i " << i;
            }
            break;
          case 1: {  // broadcast from a rotating root
            const int root = step % world;
            for (std::size_t i = 0; i < count; ++i) a[i] = rank == root ? v(root, i) : -1;
            pg.broadcast(a, root);
            for (std::size_t i = 0; i < count; ++i) ASSERT_EQ(a[i], v(root, i)) << "broadcast step " << step;
            break;
          }
          case 2:  // all_gather
            for (std::size_t i = 0; i < count; ++i) a[i] = v(rank, i);
            out.assign(count * n, -1);
            pg.all_gather_into(out, a);
            for (int r = 0; r < world; ++r) {
              for (std::size_t i = 0; i < count; ++i)
                ASSERT_EQ(out[static_cast<std::size_t>(r) * count + i], v(r, i)) << "all_gather step " << step;
            }
            break;
          default: {  // reduce_scatter: block j of rank r holds v(r, j * count + i)
            std::vector<std::int32_t> in(count * n);
            for (std::size_t i = 0; i < in.size(); ++i) in[i] = v(rank, i);
            out.assign(count, -1);
            pg.reduce_scatter_from(out, in);
            for (std::size_t i = 0; i < count; ++i) {
              std::int32_t want = 0;
              for (int r = 0; r < world; ++r) want += v(r, static_cast<std::size_t>(rank) * count + i);
              ASSERT_EQ(out[i], want) << "reduce_scatter step " << step << " count " << count;
            }
          }
        }
      }
    });
  }
}

// Halving/doubling on subgroups whose members are not numbered 0..n-1 in the world, of power-of-two and other
// sizes (the fold of the extra ranks pairs subgroup ranks, not world ranks), over tcp with small chunks.
TEST(HalvingDoubling, SubgroupsOfEverySizeMatchTheSequentialReference) {
  ProcessGroupOptions options;
  options.transport = "tcp";
  options.algorithm = kHalvingFamily;
  options.timeout = std::chrono::seconds(60);
  options.settings = kSmallChunks;
  const std::vector<std::vector<int>> shapes = {{1, 4, 6}, {0, 2, 3, 5}, {0, 2, 3, 5, 6}, {1, 2, 3, 4, 5, 6}};
  run_ranks(7, options, [&](int rank, ProcessGroup& pg) {
    for (const auto& members : shapes) {
      auto sub = pg.new_group(members);
      if (!sub->is_member()) continue;
      int seed = 7;
      check_all_reduce_and_reduce(sub->rank(), static_cast<int>(members.size()), *sub, seed);
    }
    pg.barrier();
    (void)rank;
  });
}

}  // namespace
}  // namespace ctrun::comm::testing
