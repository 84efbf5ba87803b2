// Every op through NCCL at world size 1 (one GPU), through ProcessGroup as users call it. Skips without a GPU.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <numeric>
#include <vector>

#include "comm/nccl/stream.hpp"
#include "tests/comm/nccl/gpu_test_util.hpp"

namespace ctrun::comm {
namespace {

using nccl::DeviceBuffer;
using testing::options_for;

class NcclOps : public ::testing::Test {
 protected:
  void SetUp() override {
    CTRUN_REQUIRE_GPU();
    store_ = std::make_shared<store::MemoryStore>(std::chrono::seconds(30));
    pg_ = ProcessGroup::from_store(store_, "ops", 0, 1, options_for("nccl"));
  }
  // Blocking ops only make the current (legacy default) stream wait; synchronising the device makes results
  // visible to the host-side checks.
  static void sync() { ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess); }

  std::shared_ptr<store::MemoryStore> store_;
  std::shared_ptr<ProcessGroup> pg_;
};

std::vector<float> iota_f(std::size_t n, float start = 1) {
  std::vector<float> v(n);
  std::iota(v.begin(), v.end(), start);
  return v;
}

TEST_F(NcclOps, AllReduceEveryOpAndDtypeIsIdentityAtWorldSizeOne) {
  EXPECT_EQ(pg_->backend().name(), "nccl");
  for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kProduct, ReduceOp::kMin, ReduceOp::kMax, ReduceOp::kAvg}) {
    auto host = iota_f(1000);
    auto dev = DeviceBuffer::from(host, 0);
    pg_->all_reduce(dev.view(DataType::kFloat32, host.size()), op);
    sync();
    EXPECT_EQ(dev.to_vector<float>(host.size()), host) << to_string(op);

    std::vector<std::int64_t> ints{-3, 0, 7, 1LL << 40};
    auto idev = DeviceBuffer::from(ints, 0);
    pg_->all_reduce(idev.view(DataType::kInt64, ints.size()), op);
    sync();
    EXPECT_EQ(idev.to_vector<std::int64_t>(ints.size()), ints) << to_string(op);
  }
  for (DataType dt : {DataType::kFloat64, DataType::kFloat16, DataType::kBFloat16, DataType::kInt8, DataType::kUInt8,
                      DataType::kInt32}) {
    std::vector<std::uint8_t> bytes(64 * element_size(dt), 0x3c);  // 0x3c3c: a finite half/bfloat16 value
    auto dev = DeviceBuffer::from(bytes, 0);
    pg_->all_reduce(dev.view(dt, 64), ReduceOp::kMax);
    sync();
    EXPECT_EQ(dev.to_vector<std::uint8_t>(bytes.size()), bytes) << to_string(dt);
  }
}

TEST_F(NcclOps, BitwiseReductionIsRejectedClearly) {
  DeviceBuffer dev(16, 0);
  EXPECT_THROW(pg_->all_reduce(dev.view(DataType::kInt32, 4), ReduceOp::kBxor), UnsupportedError);
}

// Host buffers (what comm's examples pass) are staged through the GPU; results land back in host memory.
TEST_F(NcclOps, HostBuffersAreStagedThroughTheGpu) {
  std::vector<float> v = iota_f(300);
  const auto expected = v;
  pg_->all_reduce(v, ReduceOp::kMax);
  EXPECT_EQ(v, expected);
  std::vector<std::int32_t> in{1, 2, 3}, out(3);
  auto work = pg_->all_gather_into_async(out, in);
  work->wait();
  EXPECT_TRUE(work->is_completed());
  EXPECT_EQ(out, in);
}

TEST_F(NcclOps, BroadcastReduceBarrier) {
  auto host = iota_f(257);
  auto dev = DeviceBuffer::from(host, 0);
  pg_->broadcast(dev.view(DataType::kFloat32, host.size()), 0);
  pg_->reduce(dev.view(DataType::kFloat32, host.size()), 0, ReduceOp::kSum);
  pg_->barrier();
  sync();
  EXPECT_EQ(dev.to_vector<float>(host.size()), host);
}

TEST_F(NcclOps, AllGatherListAndSingleBuffer) {
  auto host = iota_f(33);
  auto in = DeviceBuffer::from(host, 0);
  DeviceBuffer out(host.size() * sizeof(float), 0);
  pg_->all_gather({out.view(DataType::kFloat32, host.size())}, in.view(DataType::kFloat32, host.size()));
  sync();
  EXPECT_EQ(out.to_vector<float>(host.size()), host);
  out.fill_zero();
  pg_->all_gather_into(out.view(DataType::kFloat32, host.size()), in.view(DataType::kFloat32, host.size()));
  sync();
  EXPECT_EQ(out.to_vector<float>(host.size()), host);
}

TEST_F(NcclOps, ReduceScatterListAndSingleBuffer) {
  auto host = iota_f(40);
  auto in = DeviceBuffer::from(host, 0);
  DeviceBuffer out(host.size() * sizeof(float), 0);
  pg_->reduce_scatter(out.view(DataType::kFloat32, 40), {in.view(DataType::kFloat32, 40)}, ReduceOp::kAvg);
  sync();
  EXPECT_EQ(out.to_vector<float>(40), host);
  out.fill_zero();
  pg_->reduce_scatter_from(out.view(DataType::kFloat32, 40), in.view(DataType::kFloat32, 40));
  sync();
  EXPECT_EQ(out.to_vector<float>(40), host);
}

TEST_F(NcclOps, GatherScatterAllToAll) {
  auto host = iota_f(17);
  auto in = DeviceBuffer::from(host, 0);
  DeviceBuffer out(host.size() * sizeof(float), 0);
  auto in_view = in.view(DataType::kFloat32, 17);
  auto out_view = out.view(DataType::kFloat32, 17);
  pg_->gather({out_view}, in_view, 0);
  sync();
  EXPECT_EQ(out.to_vector<float>(17), host);
  out.fill_zero();
  pg_->scatter(out_view, {in_view}, 0);
  sync();
  EXPECT_EQ(out.to_vector<float>(17), host);
  out.fill_zero();
  pg_->all_to_all({out_view}, {in_view});
  sync();
  EXPECT_EQ(out.to_vector<float>(17), host);
  out.fill_zero();
  pg_->all_to_all_single(out_view, in_view, {17}, {17});  // uneven form with explicit splits
  sync();
  EXPECT_EQ(out.to_vector<float>(17), host);
}

TEST_F(NcclOps, SendRecvToSelfInOneBatch) {
  auto host = iota_f(100);
  auto in = DeviceBuffer::from(host, 0);
  DeviceBuffer out(host.size() * sizeof(float), 0);
  auto work = pg_->batch_isend_irecv(
      {P2POp::send(in.view(DataType::kFloat32, 100), 0), P2POp::recv(out.view(DataType::kFloat32, 100), 0)});
  work->synchronize();
  EXPECT_TRUE(work->is_completed());
  EXPECT_EQ(out.to_vector<float>(100), host);
  // Alone, a send to self could never complete: refused before NCCL sees it.
  EXPECT_THROW(pg_->send(in.view(DataType::kFloat32, 100), 0), InvalidArgumentError);
  EXPECT_THROW(pg_->batch_isend_irecv({P2POp::send(in.view(DataType::kFloat32, 100), 0),
                                       P2POp::recv(out.view(DataType::kFloat32, 50), 0)}),
               InvalidArgumentError);
}

// Ops are ordered after the caller's current stream, and wait() makes that stream wait without a host sync.
TEST_F(NcclOps, OpsFollowAndFeedTheCallersStream) {
  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  const std::size_t n = 1 << 20;
  auto host = iota_f(n);
  DeviceBuffer dev(n * sizeof(float), 0);
  std::vector<float> result(n);
  {
    nccl::StreamGuard guard(stream);
    // Queued on the caller's stream: the all_reduce must see the uploaded data, the download its result.
    ASSERT_EQ(cudaMemcpyAsync(dev.data(), host.data(), n * sizeof(float), cudaMemcpyHostToDevice, stream), cudaSuccess);
    auto work = pg_->all_reduce_async(dev.view(DataType::kFloat32, n), ReduceOp::kMax);
    work->wait();
    ASSERT_EQ(cudaMemcpyAsync(result.data(), dev.data(), n * sizeof(float), cudaMemcpyDeviceToHost, stream),
              cudaSuccess);
    ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
    EXPECT_TRUE(work->is_completed());
    EXPECT_FALSE(work->exception());
  }
  EXPECT_EQ(result, host);
  cudaStreamDestroy(stream);
}

TEST_F(NcclOps, NewGroupOfTheWholeWorldSplitsTheCommunicator) {
  auto sub = pg_->new_group({0});
  ASSERT_TRUE(sub->is_member());
  EXPECT_EQ(sub->backend().name(), "nccl");
  auto host = iota_f(9);
  auto dev = DeviceBuffer::from(host, 0);
  sub->all_reduce(dev.view(DataType::kFloat32, 9));
  sync();
  EXPECT_EQ(dev.to_vector<float>(9), host);
}

}  // namespace
}  // namespace ctrun::comm
