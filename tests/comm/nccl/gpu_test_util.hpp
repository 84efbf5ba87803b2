#pragma once
// Shared by the GPU tests: skip with the reason when no CUDA GPU is usable, options for a backend; threads-as-ranks
// come from tests/comm/harness.hpp.

#include <gtest/gtest.h>

#include <string>

#include "comm/nccl/device_memory.hpp"
#include "comm/process_group.hpp"
#include "tests/comm/harness.hpp"

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

}  // namespace ctrun::comm::testing
