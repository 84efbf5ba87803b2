#include "agent/health/node_check_context.hpp"

#include "agent/base/gpus.hpp"

namespace ctrun::agent {

std::optional<NodeCheckContext> node_check_context(const LaunchConfig& config, const EnvLookup& env,
                                                   const std::string& log_dir,
                                                   const std::function<std::uint64_t()>& checkpoint_held) {
  if (config.health.no_builtin_checks) return std::nullopt;
  NodeCheckContext c;
  c.log_dir = log_dir;
  c.min_free_bytes = config.health.min_free;
  if (config.checkpoint.memory && *config.checkpoint.memory > 0) {
    c.checkpoint_limit = *config.checkpoint.memory;
    c.checkpoint_held = checkpoint_held ? checkpoint_held() : 0;
  }
  c.cuda_visible_devices = env("CUDA_VISIBLE_DEVICES");
  c.gpus_expected = config.workers.nproc_per_node_spec == "gpu" ? config.workers.nproc_per_node
                                                                : named_gpu_count(c.cuda_visible_devices);
  return c;
}

}  // namespace ctrun::agent
