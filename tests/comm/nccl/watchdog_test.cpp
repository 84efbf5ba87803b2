// The timeout/abort path: a missing peer or a stuck op fails within the group timeout instead of hanging, the
// communicator is aborted, and later ops fail at once. Skips without a GPU.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "comm/nccl/stream.hpp"
#include "tests/comm/nccl/gpu_test_util.hpp"

namespace ctrun::comm {
namespace {

using namespace std::chrono_literals;
using nccl::DeviceBuffer;
using testing::options_for;
using Clock = std::chrono::steady_clock;

TEST(NcclWatchdog, RankZeroAloneTimesOutJoiningTheCommunicator) {
  CTRUN_REQUIRE_GPU();
  auto store = std::make_shared<store::MemoryStore>(30s);
  const auto start = Clock::now();
  // World size 2 but rank 1 never comes: ncclCommInitRank must give up at the timeout, not hang.
  EXPECT_THROW(ProcessGroup::from_store(store, "lonely", 0, 2, options_for("nccl", 1500ms)), CommError);
  EXPECT_LT(Clock::now() - start, 20s);
}

TEST(NcclWatchdog, RankOneWithoutRankZeroTimesOutWaitingForTheId) {
  CTRUN_REQUIRE_GPU();
  auto store = std::make_shared<store::MemoryStore>(30s);
  const auto start = Clock::now();
  EXPECT_THROW(ProcessGroup::from_store(store, "orphan", 1, 2, options_for("nccl", 500ms)), TimeoutError);
  EXPECT_LT(Clock::now() - start, 10s);
}

// Holds a stream in a host callback until released (or 5 s pass), so the op queued behind it cannot finish.
struct StreamBlocker {
  std::atomic<bool> release{false};
  static void CUDART_CB hold(void* self) {
    auto* b = static_cast<StreamBlocker*>(self);
    const auto until = Clock::now() + 5s;
    while (!b->release.load() && Clock::now() < until) std::this_thread::sleep_for(1ms);
  }
};

TEST(NcclWatchdog, StuckOpIsAbortedAtTheTimeoutAndTheGroupRefusesLaterOps) {
  CTRUN_REQUIRE_GPU();
  auto store = std::make_shared<store::MemoryStore>(30s);
  auto pg = ProcessGroup::from_store(store, "stuck", 0, 1, options_for("nccl", 500ms));
  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  StreamBlocker blocker;
  DeviceBuffer dev(4096, 0);
  WorkPtr work;
  {
    nccl::StreamGuard guard(stream);
    ASSERT_EQ(cudaLaunchHostFunc(stream, &StreamBlocker::hold, &blocker), cudaSuccess);
    work = pg->all_reduce_async(dev.view(DataType::kFloat32, 1024));  // ordered after the blocked stream
  }
  const auto start = Clock::now();
  EXPECT_THROW(work->synchronize(), TimeoutError);
  EXPECT_LT(Clock::now() - start, 15s);
  blocker.release = true;
  ASSERT_TRUE(work->is_completed());
  EXPECT_TRUE(work->exception());
  // The communicator is gone: later ops fail at once with the original error instead of hanging.
  auto later = pg->all_reduce_async(dev.view(DataType::kFloat32, 1024));
  EXPECT_TRUE(later->is_completed());
  EXPECT_THROW(later->synchronize(), CommError);
  cudaStreamSynchronize(stream);
  cudaStreamDestroy(stream);
}

TEST(NcclWatchdog, AbortFailsPendingOpsAndLaterOps) {
  CTRUN_REQUIRE_GPU();
  auto store = std::make_shared<store::MemoryStore>(30s);
  auto pg = ProcessGroup::from_store(store, "aborted", 0, 1, options_for("nccl", 30s));
  DeviceBuffer dev(4096, 0);
  pg->backend().abort("test abort");
  auto later = pg->all_reduce_async(dev.view(DataType::kFloat32, 1024));
  try {
    later->synchronize();
    FAIL() << "an op on an aborted nccl group succeeded";
  } catch (const CommError& e) {
    EXPECT_NE(std::string(e.what()).find("test abort"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace ctrun::comm
