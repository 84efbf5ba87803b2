// Several ranks on one GPU through the cpu backend with CUDA buffers (staged through pinned host memory).
// Threads as ranks over a MemoryStore; every rank's buffers live on device 0. Skips without a GPU.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "comm/nccl/pinned_pool.hpp"
#include "tests/comm/nccl/gpu_test_util.hpp"

namespace ctrun::comm {
namespace {

using nccl::DeviceBuffer;
using testing::options_for;
using testing::run_ranks;

constexpr int kRanks = 4;

TEST(CudaStaging, CollectivesOnDeviceBuffersMatchTheReference) {
  CTRUN_REQUIRE_GPU();
  run_ranks(kRanks, options_for("cpu"), [](int rank, ProcessGroup& pg) {
    const std::size_t n = 1000;
    // all_reduce: sum over ranks of (rank + i)
    std::vector<std::int32_t> v(n);
    for (std::size_t i = 0; i < n; ++i) v[i] = rank + static_cast<std::int32_t>(i);
    auto dv = DeviceBuffer::from(v, 0);
    pg.all_reduce(dv.view(DataType::kInt32, n));
    auto got = dv.to_vector<std::int32_t>(n);
    for (std::size_t i = 0; i < n; ++i) ASSERT_EQ(got[i], 6 + 4 * static_cast<std::int32_t>(i)) << i;

    // broadcast from rank 1
    std::vector<float> b(n, float(rank));
    auto db = DeviceBuffer::from(b, 0);
    pg.broadcast(db.view(DataType::kFloat32, n), 1);
    EXPECT_EQ(db.to_vector<float>(n), std::vector<float>(n, 1.0f));

    // all_gather into one device buffer
    std::vector<float> mine(3, float(rank * 10));
    auto din = DeviceBuffer::from(mine, 0);
    DeviceBuffer dall(3 * kRanks * sizeof(float), 0);
    pg.all_gather_into(dall.view(DataType::kFloat32, 3 * kRanks), din.view(DataType::kFloat32, 3));
    auto all = dall.to_vector<float>(3 * kRanks);
    for (int r = 0; r < kRanks; ++r) EXPECT_EQ(all[static_cast<std::size_t>(r) * 3], float(r * 10));

    // reduce_scatter: each rank gets the sum of its block
    std::vector<double> rs(2 * kRanks, 1.0 + rank);
    auto drs = DeviceBuffer::from(rs, 0);
    DeviceBuffer dout(2 * sizeof(double), 0);
    pg.reduce_scatter_from(dout.view(DataType::kFloat64, 2), drs.view(DataType::kFloat64, 2 * kRanks));
    EXPECT_EQ(dout.to_vector<double>(2), std::vector<double>(2, 10.0));

    // reduce to root 2 (MAX)
    std::vector<std::int64_t> red{rank, -rank};
    auto dred = DeviceBuffer::from(red, 0);
    pg.reduce(dred.view(DataType::kInt64, 2), 2, ReduceOp::kMax);
    if (rank == 2) {
      EXPECT_EQ(dred.to_vector<std::int64_t>(2), (std::vector<std::int64_t>{3, 0}));
    }
  });
}

TEST(CudaStaging, PointToPointGatherScatterAllToAllOnDeviceBuffers) {
  CTRUN_REQUIRE_GPU();
  run_ranks(kRanks, options_for("cpu"), [](int rank, ProcessGroup& pg) {
    // ring exchange through batch_isend_irecv
    const int next = (rank + 1) % kRanks, prev = (rank + kRanks - 1) % kRanks;
    auto dsend = DeviceBuffer::from(std::vector<std::int32_t>(64, rank), 0);
    DeviceBuffer drecv(64 * sizeof(std::int32_t), 0);
    pg.batch_isend_irecv(
          {P2POp::send(dsend.view(DataType::kInt32, 64), next), P2POp::recv(drecv.view(DataType::kInt32, 64), prev)})
        ->wait();
    EXPECT_EQ(drecv.to_vector<std::int32_t>(64), std::vector<std::int32_t>(64, prev));

    // gather to 0, scatter from 3
    auto dmine = DeviceBuffer::from(std::vector<float>(5, float(rank)), 0);
    DeviceBuffer dgathered(5 * kRanks * sizeof(float), 0);
    std::vector<Buffer> outs;
    if (rank == 0) outs = dgathered.view(DataType::kFloat32, 5 * kRanks).split(kRanks);
    pg.gather(outs, dmine.view(DataType::kFloat32, 5), 0);
    if (rank == 0) {
      auto g = dgathered.to_vector<float>(5 * kRanks);
      for (int r = 0; r < kRanks; ++r) EXPECT_EQ(g[static_cast<std::size_t>(r) * 5], float(r));
    }
    std::vector<float> chunks(5 * kRanks);
    for (std::size_t i = 0; i < chunks.size(); ++i) chunks[i] = float(i / 5);
    auto dchunks = DeviceBuffer::from(chunks, 0);
    DeviceBuffer dpart(5 * sizeof(float), 0);
    std::vector<Buffer> ins;
    if (rank == 3) ins = dchunks.view(DataType::kFloat32, 5 * kRanks).split(kRanks);
    pg.scatter(dpart.view(DataType::kFloat32, 5), ins, 3);
    EXPECT_EQ(dpart.to_vector<float>(5), std::vector<float>(5, float(rank)));

    // uneven all_to_all: rank r sends (p + 1) elements valued r*100+p to peer p
    std::vector<std::size_t> in_splits, out_splits;
    std::vector<std::int32_t> send;
    for (int p = 0; p < kRanks; ++p) {
      in_splits.push_back(static_cast<std::size_t>(p + 1));
      out_splits.push_back(static_cast<std::size_t>(rank + 1));
      for (int k = 0; k <= p; ++k) send.push_back(rank * 100 + p);
    }
    auto da2a_in = DeviceBuffer::from(send, 0);
    const std::size_t out_count = static_cast<std::size_t>(kRanks * (rank + 1));
    DeviceBuffer da2a_out(out_count * sizeof(std::int32_t), 0);
    pg.all_to_all_single(da2a_out.view(DataType::kInt32, out_count), da2a_in.view(DataType::kInt32, send.size()),
                         out_splits, in_splits);
    auto recvd = da2a_out.to_vector<std::int32_t>(out_count);
    for (int p = 0; p < kRanks; ++p) {
      EXPECT_EQ(recvd[static_cast<std::size_t>(p * (rank + 1))], p * 100 + rank) << "from " << p;
    }
  });
  EXPECT_GT(nccl::PinnedPool::instance().cached_bytes(), 0u);  // staging blocks are reused, not freed per op
}

}  // namespace
}  // namespace ctrun::comm
