// --cpu-bind slices from a CPU list and NUMA nodes.
#include "agent/process/cpu_bind.hpp"

#include <gtest/gtest.h>

namespace ctrun::agent {
namespace {

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
