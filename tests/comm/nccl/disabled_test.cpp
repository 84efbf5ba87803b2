// A program linking only ctrun_comm (CUDA build or not): the nccl backend is absent and asking for it explains
// how to get it (link ctrun_comm_nccl).
#include <gtest/gtest.h>

#include <string>

#include "comm/backend.hpp"

namespace ctrun::comm {
namespace {

TEST(NcclDisabled, NcclIsNotRegisteredAndTheErrorSaysHowToEnableIt) {
  EXPECT_FALSE(has_backend("nccl"));
  try {
    create_backend("nccl", BackendContext{});
    FAIL() << "create_backend(\"nccl\") succeeded in a program that does not link ctrun_comm_nccl";
  } catch (const UnsupportedError& e) {
    EXPECT_NE(std::string(e.what()).find("CTRUN_WITH_NCCL"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("comm_nccl"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace ctrun::comm
