#include "agent/report/agent_words.hpp"

#include <spdlog/spdlog.h>
#include <nlohmann/json.hpp>

#include "agent/base/event_log.hpp"
#include "agent/launch/rendezvous_factory.hpp"
#include "agent/launch/worker_python.hpp"
#include "agent/policy/agent_policy.hpp"
#include "common/log.hpp"

namespace ctrun::agent {

void say_start(const LaunchConfig& config, const EnvLookup& env, EventLog& events, const rdzv::Handler& handler,
               const std::string& master_addr, std::uint16_t master_port) {
  auto log = log::get("agent");
  log->info("Starting ctrun agent: run_id={} nproc_per_node={} max_restarts={} nnodes={}:{} rdzv={} store={}",
            handler.run_id(), config.workers.nproc_per_node, config.restarts.max_restarts, config.rdzv.min_nodes,
            config.rdzv.max_nodes, handler.backend(),
            master_port ? master_addr + ":" + std::to_string(master_port) : "(node rank 0's)");
  if (!config.workers.no_python || config.workers.run_path)
    log->info("workers' python: {}", describe(worker_python(env)));
  events.emit(Event::kAgentStart, {{"run_id", handler.run_id()},
                                   {"nproc_per_node", config.workers.nproc_per_node},
                                   {"max_restarts", config.restarts.max_restarts},
                                   {"master_addr", master_addr},
                                   {"master_port", master_port},
                                   {"rdzv_store", handler.served_store()}});
}

void say_round(const LaunchConfig& config, EventLog& events, const std::string& run_id, const rdzv::RoundInfo& round) {
  if (!is_single_node(config)) {
    log::get("agent")->warn(
        "round {} of rendezvous '{}' formed: {} node(s), world size {}; this node is group rank {} with ranks {}..{}",
        round.round, run_id, round.group_world_size, round.global_world_size, round.group_rank, round.base_global_rank,
        round.base_global_rank + config.workers.nproc_per_node - 1);
  }
  events.emit(Event::kRendezvous, {{"round", round.round},
                                   {"group_rank", round.group_rank},
                                   {"group_world_size", round.group_world_size},
                                   {"world_size", round.global_world_size}});
}

void say_restart(const LaunchConfig& config, EventLog& events, int remaining_before, int count,
                 const ProgressCount& progress, std::uint64_t collectives, const std::optional<std::string>& resume) {
  auto log = log::get("agent");
  // As torchrun: the count before this restart uses one ("2/2 attempts left" on the first failure).
  log->warn("[{}] Worker group FAILED. {}/{} attempts left; will restart worker group", config.workers.role,
            remaining_before, config.restarts.max_restarts);
  events.emit(Event::kRestart, {{"restart_count", count},
                                {"remaining_restarts", remaining_before - 1},
                                {"attempts_without_progress", progress.failed_in_a_row()}});
  if (config.restarts.stop_without_progress > 0 && progress.failed_in_a_row() > 0)
    log->warn(
        "[{}] the attempt made no progress ({}): {} failed attempt(s) in a row without progress; the job stops after "
        "{} (--stop-without-progress {})",
        config.workers.role, progress.baseline(collectives), progress.failed_in_a_row(),
        config.restarts.stop_without_progress + 1, config.restarts.stop_without_progress);
  if (resume) log->warn("[{}] {}", config.workers.role, *resume);
}

int say_no_progress(const LaunchConfig& config, EventLog& events, const ProgressCount& progress,
                    std::uint64_t collectives, std::optional<std::int64_t> resume_step) {
  const int failed = progress.failed_in_a_row();
  const int restarts = failed - 1;  // the attempts after the first that made no progress
  log::get("agent")->error(
      "[{}] stopping instead of restarting: {} failed attempt(s) in a row ({} restart(s)) made no progress ({}; "
      "--stop-without-progress {}); exit code {}",
      config.workers.role, failed, restarts, progress.baseline(collectives), config.restarts.stop_without_progress,
      kNoProgressExitCode);
  events.emit(Event::kNoProgress, {{"restarts_without_progress", restarts},
                                   {"resume_step", resume_step ? nlohmann::json(*resume_step) : nlohmann::json()},
                                   {"exit_code", kNoProgressExitCode}});
  return kNoProgressExitCode;
}

}  // namespace ctrun::agent
