// Runs in every NCCL build, GPU or not: what CI can check of the nccl backend without a GPU.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "comm/nccl/cuda_check.hpp"
#include "comm/nccl/device_memory.hpp"
#include "tests/comm/nccl/gpu_test_util.hpp"

namespace ctrun::comm {
namespace {

using testing::options_for;
using testing::run_ranks;

bool gpu_available() { return nccl::cuda_unavailable_reason().empty(); }

TEST(NcclBuild, NcclAndCpuAreRegistered) {
  EXPECT_TRUE(has_backend("nccl"));
  EXPECT_TRUE(has_backend("cpu"));
}

TEST(NcclBuild, GpuProbeIsConsistent) {
  EXPECT_EQ(nccl::cuda_unavailable_reason().empty(), nccl::cuda_device_count() > 0);
}

TEST(NcclBuild, NcclGroupWithoutGpuFailsWithClearError) {
  auto store = std::make_shared<store::MemoryStore>(std::chrono::seconds(5));
  if (gpu_available()) {
    auto pg = ProcessGroup::from_store(store, "g", 0, 1, options_for("nccl"));
    EXPECT_EQ(pg->backend().name(), "nccl");
    return;
  }
  try {
    ProcessGroup::from_store(store, "g", 0, 1, options_for("nccl"));
    FAIL() << "a nccl group was created on a machine without a usable GPU";
  } catch (const UnsupportedError& e) {
    EXPECT_NE(std::string(e.what()).find("needs a CUDA GPU"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("cpu"), std::string::npos) << e.what();
  }
}

TEST(NcclBuild, DeviceBufferWithoutGpuThrowsUnsupported) {
  if (gpu_available()) GTEST_SKIP() << "this machine has a GPU; the no-GPU error path cannot be exercised";
  EXPECT_THROW(nccl::DeviceBuffer(1024, 0), UnsupportedError);
}

TEST(NcclBuild, DataTypesMapToNccl) {
  EXPECT_EQ(nccl::to_nccl(DataType::kFloat32), ncclFloat32);
  EXPECT_EQ(nccl::to_nccl(DataType::kFloat64), ncclFloat64);
  EXPECT_EQ(nccl::to_nccl(DataType::kFloat16), ncclFloat16);
  EXPECT_EQ(nccl::to_nccl(DataType::kBFloat16), ncclBfloat16);
  EXPECT_EQ(nccl::to_nccl(DataType::kInt8), ncclInt8);
  EXPECT_EQ(nccl::to_nccl(DataType::kUInt8), ncclUint8);
  EXPECT_EQ(nccl::to_nccl(DataType::kInt32), ncclInt32);
  EXPECT_EQ(nccl::to_nccl(DataType::kInt64), ncclInt64);
}

TEST(NcclBuild, ReduceOpsMapToNcclAndBitwiseIsRejected) {
  EXPECT_EQ(nccl::to_nccl(ReduceOp::kSum), ncclSum);
  EXPECT_EQ(nccl::to_nccl(ReduceOp::kProduct), ncclProd);
  EXPECT_EQ(nccl::to_nccl(ReduceOp::kMin), ncclMin);
  EXPECT_EQ(nccl::to_nccl(ReduceOp::kMax), ncclMax);
  EXPECT_EQ(nccl::to_nccl(ReduceOp::kAvg), ncclAvg);
  for (ReduceOp op : {ReduceOp::kBand, ReduceOp::kBor, ReduceOp::kBxor}) {
    EXPECT_THROW(nccl::to_nccl(op), UnsupportedError) << to_string(op);
  }
}

TEST(NcclBuild, NcclErrorsMapToCommErrors) {
  EXPECT_THROW(nccl::throw_nccl(ncclRemoteError, "op"), PeerError);
  EXPECT_THROW(nccl::throw_nccl(ncclInvalidArgument, "op"), InvalidArgumentError);
  EXPECT_THROW(nccl::throw_nccl(ncclInternalError, "op"), CommError);
  EXPECT_THROW(nccl::throw_cuda(cudaErrorNoDevice, "op"), UnsupportedError);
  EXPECT_THROW(nccl::throw_cuda(cudaErrorIllegalAddress, "op"), CommError);
}

// In CUDA builds the cpu backend is wrapped by the staging decorator: host buffers must go straight through it.
TEST(NcclBuild, CpuBackendWithHostBuffersPassesThroughStaging) {
  run_ranks(3, options_for("cpu"), [](int rank, ProcessGroup& pg) {
    EXPECT_EQ(pg.backend().name(), "cpu");
    // The wrapper accepts CUDA buffers where that GPU exists.
    EXPECT_EQ(pg.backend().supports(Device::cuda(0)), gpu_available());
    EXPECT_FALSE(pg.backend().supports(Device::cuda(1 << 20)));
    std::vector<std::int32_t> v(5, rank + 1);
    pg.all_reduce(v);
    EXPECT_EQ(v, std::vector<std::int32_t>(5, 6));

    std::vector<float> out(3), in{float(rank), float(rank), float(rank)};
    const int next = (rank + 1) % 3, prev = (rank + 2) % 3;
    pg.batch_isend_irecv({P2POp::send(in, next), P2POp::recv(out, prev)})->wait();
    EXPECT_EQ(out, std::vector<float>(3, float(prev)));

    auto sub = pg.new_group({0, 2});
    if (sub->is_member()) {
      std::vector<std::int64_t> s{rank};
      sub->all_reduce(s, ReduceOp::kMax);
      EXPECT_EQ(s[0], 2);
    }
  });
}

TEST(NcclBuild, CpuBackendRejectsCudaBuffersWithoutGpu) {
  if (gpu_available()) GTEST_SKIP() << "this machine has a GPU; the no-GPU error path cannot be exercised";
  run_ranks(2, options_for("cpu"), [](int, ProcessGroup& pg) {
    // Never dereferenced: rejected before any op, as in builds without CUDA.
    static float fake = 0;
    Buffer device_buffer(&fake, 1, Device::cuda(0));
    EXPECT_THROW(pg.all_reduce(device_buffer), InvalidArgumentError);
  });
}

}  // namespace
}  // namespace ctrun::comm
