#pragma once
// Built-in health checks: what a node needs before it joins a round, checked beside --health-check (and with the
// same outcome when one fails: the node stays out of the round, retries with backoff, and exits with
// kHealthCheckExitCode after the rendezvous' join_timeout). One row per check in node_check_table(): its name (in
// logs and events), what it checks, and the function. Each reads only what its context names (a fake /proc root,
// temporary directories in tests). statvfs of a log directory on a hung network file system can block: the agent
// runs them on its helper lane, never on the loop.

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace ctrun::agent {

struct NodeCheckContext {
  std::string log_dir;                  // the run's log directory ("" when logs go to the console only)
  std::string shm_dir = "/dev/shm";     // where in-memory checkpoints and the progress regions live
  std::string proc_root = "/proc";      // for /proc/driver/nvidia/gpus
  std::uint64_t min_free_bytes = 0;     // --health-min-free: for the log directory and /dev/shm
  std::uint64_t checkpoint_limit = 0;   // an explicit --checkpoint-memory (0: none given or checkpoints off)
  std::uint64_t checkpoint_held = 0;    // what this job's checkpoints hold in shm_dir already
  int gpus_expected = 0;                // --nproc-per-node=gpu's count, or CUDA_VISIBLE_DEVICES' entries
  std::optional<std::string> cuda_visible_devices;
};

struct NodeCheck {
  std::string_view name;
  std::string_view doc;
  // A sentence saying what is wrong and what to do, or nullopt when the node passes.
  std::optional<std::string> (*run)(const NodeCheckContext&);
};

std::span<const NodeCheck> node_check_table();

struct NodeCheckFailure {
  std::string name;
  std::string problem;
};
// The first failing check, in table order; nullopt when every check passes.
std::optional<NodeCheckFailure> run_node_checks(const NodeCheckContext& context);

// Free bytes for an unprivileged writer at `path` (statvfs); nullopt when it cannot be asked.
std::optional<std::uint64_t> free_bytes(const std::string& path);

}  // namespace ctrun::agent
