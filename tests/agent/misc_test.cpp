// Signal names, GPU counting without CUDA, CPU slices.
#include <gtest/gtest.h>

#include <csignal>
#include <filesystem>
#include <fstream>

#include "agent/cpu_bind.hpp"
#include "agent/nproc.hpp"
#include "agent/signal_names.hpp"

namespace ctrun::agent {
namespace {

TEST(SignalNames, BothWays) {
  EXPECT_EQ(signal_name(SIGSEGV), "SIGSEGV");
  EXPECT_EQ(signal_name(SIGTERM), "SIGTERM");
  EXPECT_EQ(signal_number("SIGUSR1"), SIGUSR1);
  EXPECT_EQ(signal_number("HUP"), SIGHUP);
  EXPECT_EQ(signal_number("15"), 15);
  EXPECT_FALSE(signal_number("SIGNOPE"));
}

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
  std::string dir = ::testing::TempDir() + "/ctrun_fake_gpus";
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

TEST(CpuBind, Slices) {
  EXPECT_EQ(parse_cpu_list("0-2,5,7-8\n"), (std::vector<int>{0, 1, 2, 5, 7, 8}));
  std::vector<int> cpus = {0, 1, 2, 3, 4, 5, 6, 7};
  std::vector<std::vector<int>> nodes = {{0, 1, 2, 3}, {4, 5, 6, 7}};
  EXPECT_EQ(cpu_slice(CpuBind::kCore, 1, 4, cpus, nodes), (std::vector<int>{2, 3}));
  EXPECT_EQ(cpu_slice(CpuBind::kCore, 9, 10, cpus, nodes), (std::vector<int>{1}));
  EXPECT_EQ(cpu_slice(CpuBind::kNuma, 3, 4, cpus, nodes), (std::vector<int>{4, 5, 6, 7}));
  EXPECT_TRUE(cpu_slice(CpuBind::kNone, 0, 4, cpus, nodes).empty());
  EXPECT_FALSE(numa_nodes(cpus).empty());
}

}  // namespace
}  // namespace ctrun::agent
