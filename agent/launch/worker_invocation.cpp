#include "agent/launch/worker_invocation.hpp"

#include <cstring>
#include <filesystem>
#include <tuple>

#include "agent/launch/worker_python.hpp"
#include "common/text.hpp"
#include "common/worker_env.hpp"

namespace ctrun::agent {
namespace {

std::string substitute_local_rank(std::string arg, int local_rank) {
  static const std::string macro = "${local_rank}";
  for (size_t pos = arg.find(macro); pos != std::string::npos; pos = arg.find(macro, pos)) {
    arg.replace(pos, macro.size(), std::to_string(local_rank));
  }
  return arg;
}

}  // namespace

std::optional<std::string> torch_module_dir() {
  // comm's torch.distributed backend (import ctrun_torch) is built into <build>/python, next to <build>/bin/ctrun.
  // An installed one sits in python3's dist-packages, which python finds by itself.
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path dir = fs::read_symlink("/proc/self/exe", ec).parent_path().parent_path() / "python";
  if (ec) return std::nullopt;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    if (it->path().filename().string().starts_with("ctrun_torch")) return dir.string();
  }
  return std::nullopt;
}

std::optional<std::string> sitecustomize_dir() {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path prefix = fs::read_symlink("/proc/self/exe", ec).parent_path().parent_path();
  if (ec) return std::nullopt;
  for (const fs::path& dir : {prefix / "python", prefix / "share" / "ctrun" / "python"}) {
    if (fs::exists(dir / "sitecustomize.py", ec)) return dir.string();
  }
  return std::nullopt;
}

std::string python_dirs() {
  // Where ctrun is installed does not change while it runs: looked up once, not at every worker's start.
  static const std::string dirs = [] {
    std::string out;
    for (const auto& dir : {sitecustomize_dir(), torch_module_dir()}) {
      if (!dir || (":" + out + ":").find(":" + *dir + ":") != std::string::npos) continue;
      out += (out.empty() ? "" : ":") + *dir;
    }
    return out;
  }();
  return dirs;
}

std::map<std::string, std::string> worker_env_overrides(const WorkerEnvInput& in, const EnvLookup& parent_env) {
  const LaunchConfig& c = *in.config;
  const rdzv::RoundInfo& round = *in.round;
  int lws = c.workers.nproc_per_node;
  std::map<std::string, std::string> env;
  env[worker_env::kLocalRank] = std::to_string(c.workers.virtual_local_rank ? 0 : in.local_rank);
  env[worker_env::kRank] = std::to_string(round.base_global_rank + in.local_rank);
  env[worker_env::kGroupRank] = std::to_string(round.group_rank);
  env[worker_env::kRoleRank] = std::to_string(round.base_role_rank + in.local_rank);
  env[worker_env::kRoleName] = c.workers.role;
  env[worker_env::kLocalWorldSize] = std::to_string(lws);
  env[worker_env::kWorldSize] = std::to_string(round.global_world_size);
  env[worker_env::kGroupWorldSize] = std::to_string(round.group_world_size);
  env[worker_env::kRoleWorldSize] = std::to_string(round.role_world_size);
  env[worker_env::kMasterAddr] = round.master_addr;
  env[worker_env::kMasterPort] = std::to_string(round.master_port);
  env[worker_env::kRestartCount] = std::to_string(in.restart_count);
  env[worker_env::kMaxRestarts] = std::to_string(c.restarts.max_restarts);
  env[worker_env::kRunId] = in.run_id;
  env[worker_env::kUseAgentStore] = in.use_agent_store ? worker_env::kTrue : worker_env::kFalse;
  // torch >= 2.2 reads the TORCH_ name, 1.13 the old one; torchrun sets the one its version knows.
  env["TORCH_NCCL_ASYNC_ERROR_HANDLING"] = parent_env("TORCH_NCCL_ASYNC_ERROR_HANDLING").value_or("1");
  env["NCCL_ASYNC_ERROR_HANDLING"] = parent_env("NCCL_ASYNC_ERROR_HANDLING").value_or("1");
  env[worker_env::kErrorFile] = in.error_file;
  // torch's NCCL Flight Recorder (torch >= 2.2; older torch and other backends ignore it): each rank's last
  // collectives, dumped on a watchdog timeout into its log directory, next to its error file, as
  // nccl_trace_rank_<rank> (docs/hang.md). Both generations of names; the user's own settings win.
  if (!in.error_file.empty()) {
    const std::string prefix = (std::filesystem::path(in.error_file).parent_path() / "nccl_trace_rank_").string();
    // {old name, new name, value}: a user who set either name of a pair keeps it as set.
    const std::tuple<const char*, const char*, std::string> flight_recorder[] = {
        {"TORCH_NCCL_TRACE_BUFFER_SIZE", "TORCH_FR_BUFFER_SIZE", "2000"},
        {"TORCH_NCCL_DUMP_ON_TIMEOUT", "TORCH_NCCL_DUMP_ON_TIMEOUT", "1"},
        {"TORCH_NCCL_DEBUG_INFO_TEMP_FILE", "TORCH_FR_DUMP_TEMP_FILE", prefix},
    };
    for (const auto& [old_name, new_name, value] : flight_recorder) {
      if (parent_env(old_name) || parent_env(new_name)) continue;
      env[old_name] = value;
      env[new_name] = value;
    }
  }
  env[worker_env::kSignalsToHandle] = c.shutdown.signals_to_handle;
  // `import ctrun_torch` works in workers with nothing set, and ctrun can dump their Python stacks.
  if (const std::string dirs = python_dirs(); !dirs.empty()) {
    auto inherited = parent_env("PYTHONPATH");
    env["PYTHONPATH"] = dirs + (inherited && !inherited->empty() ? ":" + *inherited : "");
  }
  if (c.workers.virtual_local_rank) {
    auto cvd = parent_env("CUDA_VISIBLE_DEVICES");
    if (cvd && !cvd->empty()) {
      auto devices = text::split(*cvd, ',');
      if (in.local_rank >= static_cast<int>(devices.size())) {
        throw std::invalid_argument("--virtual-local-rank: local rank " + std::to_string(in.local_rank) +
                                    " has no entry in CUDA_VISIBLE_DEVICES=" + *cvd);
      }
      env["CUDA_VISIBLE_DEVICES"] = devices[in.local_rank];
    } else {
      env["CUDA_VISIBLE_DEVICES"] = std::to_string(in.local_rank);
    }
  }
  return env;
}

std::vector<std::string> worker_argv(const LaunchConfig& c, int local_rank, const EnvLookup& parent_env) {
  std::vector<std::string> argv;
  if (c.workers.no_python && !c.workers.run_path) {
    argv.push_back(c.script);
  } else {
    argv.push_back(worker_python(parent_env).program);
    argv.push_back("-u");
    if (c.workers.run_path) {
      // torchrun --run-path runs runpy.run_path(script, run_name="__main__") in the worker process.
      argv.push_back("-c");
      argv.push_back("import runpy, sys; sys.argv = sys.argv[1:]; runpy.run_path(sys.argv[0], run_name='__main__')");
    } else if (c.workers.module) {
      argv.push_back("-m");
    }
    argv.push_back(c.script);
  }
  for (const auto& a : c.script_args) argv.push_back(substitute_local_rank(a, local_rank));
  return argv;
}

std::string entrypoint_name(const LaunchConfig& c) { return c.script; }

std::vector<std::string> merge_environment(char** parent, const std::map<std::string, std::string>& overrides) {
  std::vector<std::string> out;
  for (char** e = parent; e != nullptr && *e != nullptr; ++e) {
    const char* eq = std::strchr(*e, '=');
    if (eq == nullptr) continue;
    if (overrides.count(std::string(*e, static_cast<std::size_t>(eq - *e))) != 0) continue;
    out.emplace_back(*e);
  }
  for (const auto& [k, v] : overrides) out.push_back(k + "=" + v);
  return out;
}

}  // namespace ctrun::agent
