// --nproc-per-node gpu/auto without CUDA: GPU counting from the driver and CUDA_VISIBLE_DEVICES.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "agent/config/nproc.hpp"

namespace ctrun::agent {
namespace {

TEST(Gpus, CudaVisibleDevices) {
  EXPECT_EQ(apply_cuda_visible_devices(4, std::nullopt), 4);
  EXPECT_EQ(apply_cuda_visible_devices(4, "1,3"), 2);
  EXPECT_EQ(apply_cuda_visible_devices(4, ""), 0);
  EXPECT_EQ(apply_cuda_visible_devices(4, "0,7,1"), 1);  // CUDA stops at the first invalid entry
  EXPECT_EQ(apply_cuda_visible_devices(4, "-1"), 0);
  EXPECT_EQ(apply_cuda_visible_devices(2, "GPU-aaaa"), 1);
  EXPECT_EQ(apply_cuda_visible_devices(0, "0"), 0);
}

TEST(Gpus, CountsDriverEntries) {
  std::string dir = ::testing::TempDir() + "/ctrun_fake_gpus_" + std::to_string(::getpid());
  std::filesystem::remove_all(dir);
  for (auto bus : {"0000:01:00.0", "0000:02:00.0", "0000:03:00.0"})
    std::filesystem::create_directories(dir + "/" + bus);
  auto no_env = [](const std::string&) -> std::optional<std::string> { return std::nullopt; };
  EXPECT_EQ(visible_gpu_count(no_env, dir), 3);
  auto cvd = [](const std::string& k) -> std::optional<std::string> {
    if (k == "CUDA_VISIBLE_DEVICES") return std::string("2");
    return std::nullopt;
  };
  EXPECT_EQ(visible_gpu_count(cvd, dir), 1);
  EXPECT_EQ(visible_gpu_count(no_env, dir + "/missing"), 0);
  std::filesystem::remove_all(dir);
}

TEST(Nproc, GpuWithoutGpusIsAnError) {
  auto hide = [](const std::string& k) -> std::optional<std::string> {
    if (k == "CUDA_VISIBLE_DEVICES") return std::string("");
    return std::nullopt;
  };
  EXPECT_THROW(resolve_nproc_per_node("gpu", hide), UsageError);
  EXPECT_GE(resolve_nproc_per_node("auto", hide), 1);
  EXPECT_GE(resolve_nproc_per_node("cpu", hide), 1);
  EXPECT_EQ(resolve_nproc_per_node("3", hide), 3);
}

}  // namespace
}  // namespace ctrun::agent
