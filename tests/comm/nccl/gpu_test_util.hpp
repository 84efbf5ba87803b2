#pragma once
// Shared by the GPU tests: skip with the reason when no CUDA GPU is usable, threads-as-ranks over a MemoryStore.

#include <gtest/gtest.h>

#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "comm/nccl/device_memory.hpp"
#include "comm/process_group.hpp"
#include "store/memory_store.hpp"

// GTEST_SKIP()s the calling test (it returns from the test body) when this machine has no usable GPU.
#define CTRUN_REQUIRE_GPU()                                                                   \
  do {                                                                                        \
    if (std::string why = ::ctrun::comm::nccl::cuda_unavailable_reason(); !why.empty()) {     \
      GTEST_SKIP() << "needs a CUDA GPU (run on a GPU machine: ctest -L comm_nccl): " << why; \
    }                                                                                         \
  } while (0)

namespace ctrun::comm::testing {

inline ProcessGroupOptions options_for(const std::string& backend, Duration timeout = std::chrono::seconds(60)) {
  ProcessGroupOptions o;
  o.backend = backend;
  o.timeout = timeout;
  return o;
}

// Runs body(rank, group) on `size` threads, one process group each over a shared MemoryStore. Failures inside a
// thread are reported by gtest (EXPECT_*); exceptions are caught and reported with the rank.
inline void run_ranks(int size, const std::string& backend, const std::function<void(int, ProcessGroup&)>& body) {
  auto store = std::make_shared<store::MemoryStore>(std::chrono::seconds(60));
  std::vector<std::thread> threads;
  for (int r = 0; r < size; ++r) {
    threads.emplace_back([&, r] {
      try {
        auto pg = ProcessGroup::from_store(store, "test", r, size, options_for(backend));
        body(r, *pg);
      } catch (const std::exception& e) {
        ADD_FAILURE() << "rank " << r << ": " << e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
}

}  // namespace ctrun::comm::testing
