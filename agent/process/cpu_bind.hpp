#pragma once
// --cpu-bind core|numa (and torchrun's --numa-binding): one slice of the machine per local rank, from the
// kernel's topology. `core` splits the CPUs ctrun may use into nproc contiguous slices; `numa` gives local
// rank r the CPUs of NUMA node r mod (number of nodes).

#include <string>
#include <vector>

#include "agent/base/launch_config.hpp"

namespace ctrun::agent {

// The CPUs ctrun may use and their NUMA nodes, read once when --cpu-bind or --numa-binding is on.
struct CpuTopology {
  std::vector<int> allowed;
  std::vector<std::vector<int>> nodes;
};

// The CPUs of each NUMA node, from <sys_node_dir>/node*/cpulist; one node with every CPU if unavailable.
std::vector<std::vector<int>> numa_nodes(const std::vector<int>& allowed,
                                         const std::string& sys_node_dir = "/sys/devices/system/node");

// CPUs of local rank r, or empty for no binding.
std::vector<int> cpu_slice(CpuBind mode, int local_rank, int nproc, const std::vector<int>& allowed,
                           const std::vector<std::vector<int>>& nodes);

// "0-3,8,10-11" -> {0,1,2,3,8,10,11}
std::vector<int> parse_cpu_list(const std::string& text);

// The CPUs ctrun itself may run on (sched_getaffinity).
std::vector<int> allowed_cpus();

}  // namespace ctrun::agent
