// agent/logs/log_layout: torchrun's log folder layout (<run_id>_<random>/attempt_N/LOCAL_RANK/ with stdout.log,
// stderr.log and error.json), and none at all for --log-dir /dev/null.
#include "agent/logs/log_layout.hpp"

#include <gtest/gtest.h>

#include <filesystem>
#include <string>

namespace ctrun::agent {
namespace {

TEST(LogLayout, TorchrunLayout) {
  std::string base = (std::filesystem::path(::testing::TempDir()) / "ctrun_layout").lexically_normal().string();
  std::filesystem::remove_all(base);
  LogLayout layout(base, "myrun");
  ASSERT_TRUE(layout.enabled());
  EXPECT_EQ(layout.run_dir().rfind(base + "/myrun_", 0), 0u);
  layout.prepare_attempt(1, 2);
  EXPECT_TRUE(std::filesystem::is_directory(layout.run_dir() + "/attempt_1/1"));
  EXPECT_EQ(layout.stdout_file(1, 0), layout.run_dir() + "/attempt_1/0/stdout.log");
  EXPECT_EQ(layout.error_file(1, 1), layout.run_dir() + "/attempt_1/1/error.json");
  LogLayout none(std::string("/dev/null"), "r");
  EXPECT_FALSE(none.enabled());
  EXPECT_EQ(none.error_file(0, 0), "");
  std::filesystem::remove_all(base);
}

}  // namespace
}  // namespace ctrun::agent
