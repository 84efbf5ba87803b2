#include "agent/config/nproc.hpp"

#include <charconv>
#include <filesystem>
#include <thread>

#include "common/log.hpp"
#include "common/text.hpp"

namespace ctrun::agent {

int resolve_nproc_per_node(const std::string& spec, const EnvLookup& env) {
  auto log = ctrun::log::get("agent");
  int cpus = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  if (spec == "cpu") {
    log->info("Using nproc_per_node=cpu, setting nproc_per_node to {} since the instance has {} cpu", cpus, cpus);
    return cpus;
  }
  if (spec == "gpu" || spec == "auto") {
    int gpus = visible_gpu_count(env);
    if (gpus > 0) {
      log->info("Using nproc_per_node={}, setting nproc_per_node to {} since the instance has {} gpu", spec, gpus,
                gpus);
      return gpus;
    }
    if (spec == "gpu") {
      throw UsageError(
          "argument --nproc-per-node: gpu requested but no GPU is visible (no NVIDIA driver "
          "entries under /proc/driver/nvidia/gpus, or CUDA_VISIBLE_DEVICES hides them)");
    }
    log->info("Using nproc_per_node=auto, setting nproc_per_node to {} since the instance has {} cpu", cpus, cpus);
    return cpus;
  }
  return text::parse_int<int>(spec).value_or(0);
}

}  // namespace ctrun::agent
