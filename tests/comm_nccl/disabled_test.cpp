// Builds without CUDA/NCCL: the nccl backend is absent and asking for it explains how to get it.
#include <gtest/gtest.h>

#include <string>

#include "comm/backend.hpp"

namespace ctrun::comm {
namespace {

TEST(NcclDisabled, NcclIsNotRegisteredAndTheErrorSaysHowToEnableIt) {
  EXPECT_FALSE(has_backend("nccl"));
  try {
    create_backend("nccl", BackendContext{});
    FAIL() << "create_backend(\"nccl\") succeeded in a build without NCCL";
  } catch (const UnsupportedError& e) {
    EXPECT_NE(std::string(e.what()).find("CTRUN_WITH_NCCL"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace ctrun::comm
