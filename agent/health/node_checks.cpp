#include "agent/health/node_checks.hpp"

#include <sys/statvfs.h>

#include <algorithm>
#include <array>
#include <filesystem>

#include "agent/base/gpus.hpp"
#include "agent/base/memory_size.hpp"

namespace ctrun::agent {
namespace {


// The directory itself, or the nearest ancestor that exists (a log directory is made when the first attempt starts).
std::string existing_ancestor(std::string path) {
  std::error_code ec;
  std::filesystem::path p(path);
  while (!p.empty() && !std::filesystem::exists(p, ec) && p != p.parent_path()) p = p.parent_path();
  return p.empty() ? std::string(".") : p.string();
}

std::optional<std::string> too_little_space(const std::string& what, const std::string& dir, std::uint64_t need,
                                            const std::string& flag) {
  const auto free = free_bytes(dir);
  if (!free) return std::nullopt;  // cannot be asked (a file system without statvfs): not this check's to judge
  if (*free >= need) return std::nullopt;
  return what + " " + dir + " has " + format_bytes(*free) + " free, less than the " + format_bytes(need) + " of " +
         flag + ": free some space there (or lower " + flag + ")";
}

std::optional<std::string> log_dir_space(const NodeCheckContext& c) {
  if (c.log_dir.empty() || c.min_free_bytes == 0) return std::nullopt;
  return too_little_space("the log directory's file system at", existing_ancestor(c.log_dir), c.min_free_bytes,
                          "--health-min-free");
}

// What ctrun itself puts there for a job that keeps no checkpoints: a progress region of a few KiB per attempt.
// Not --health-min-free: a container's /dev/shm is often 64 MiB, where jobs run well; checkpoints ask through
// checkpoint_memory below.
constexpr std::uint64_t kShmFloor = std::uint64_t{1} << 20;

std::optional<std::string> shm_space(const NodeCheckContext& c) {
  if (c.min_free_bytes == 0) return std::nullopt;
  return too_little_space("shared memory", c.shm_dir, std::min(c.min_free_bytes, kShmFloor), "--health-min-free");
}

// An explicit --checkpoint-memory promises the workers that much: the snapshots already held count as room.
std::optional<std::string> checkpoint_memory(const NodeCheckContext& c) {
  if (c.checkpoint_limit == 0) return std::nullopt;
  const auto free = free_bytes(c.shm_dir);
  if (!free || *free + c.checkpoint_held >= c.checkpoint_limit) return std::nullopt;
  return "shared memory " + c.shm_dir + " has " + format_bytes(*free) + " free and this job's checkpoints hold " +
         format_bytes(c.checkpoint_held) + ": less than the " + format_bytes(c.checkpoint_limit) +
         " of --checkpoint-memory (free /dev/shm, or lower --checkpoint-memory)";
}

std::optional<std::string> gpus_present(const NodeCheckContext& c) {
  if (c.gpus_expected <= 0) return std::nullopt;
  const std::string dir = c.proc_root + "/driver/nvidia/gpus";
  const auto cvd = c.cuda_visible_devices;
  const int visible = visible_gpu_count([&](const std::string& name) -> std::optional<std::string> {
    return name == "CUDA_VISIBLE_DEVICES" ? cvd : std::nullopt;
  }, dir);
  if (visible >= c.gpus_expected) return std::nullopt;
  return "the job expects " + std::to_string(c.gpus_expected) + " GPU(s) on this node but " +
         std::to_string(visible) + " are present (" + dir + (cvd ? ", CUDA_VISIBLE_DEVICES=" + *cvd : "") +
         "): check the driver (nvidia-smi) and the node's GPUs";
}

constexpr std::array kTable = {
    NodeCheck{"log_dir_space", "the log directory's file system has --health-min-free bytes free", log_dir_space},
    NodeCheck{"shm_space", "/dev/shm has 1 MiB free (ctrun's progress records; less when --health-min-free is less)",
              shm_space},
    NodeCheck{"checkpoint_memory",
              "an explicit --checkpoint-memory fits in /dev/shm's free space plus what the job's checkpoints hold",
              checkpoint_memory},
    NodeCheck{"gpus_present",
              "the GPUs --nproc-per-node=gpu counted, or CUDA_VISIBLE_DEVICES names, are present "
              "(/proc/driver/nvidia/gpus)",
              gpus_present},
};

}  // namespace

std::span<const NodeCheck> node_check_table() { return kTable; }

std::optional<NodeCheckFailure> run_node_checks(const NodeCheckContext& context) {
  for (const auto& check : kTable) {
    if (auto problem = check.run(context)) return NodeCheckFailure{std::string(check.name), *problem};
  }
  return std::nullopt;
}

std::optional<std::uint64_t> free_bytes(const std::string& path) {
  struct statvfs s {};
  if (::statvfs(path.c_str(), &s) != 0) return std::nullopt;
  return static_cast<std::uint64_t>(s.f_bavail) * s.f_frsize;
}

}  // namespace ctrun::agent
