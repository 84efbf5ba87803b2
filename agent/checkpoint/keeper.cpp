#include "agent/checkpoint/keeper.hpp"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <map>
#include <vector>

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <nlohmann/json.hpp>

#include "agent/base/event_log.hpp"
#include "agent/checkpoint/agreement.hpp"
#include "agent/checkpoint/job_directory.hpp"
#include "agent/checkpoint/layout.hpp"
#include "agent/checkpoint/memory_limit.hpp"
#include "agent/checkpoint/memory_size.hpp"
#include "agent/checkpoint/notices.hpp"
#include "agent/checkpoint/spill.hpp"
#include "agent/launch/worker_invocation.hpp"
#include "agent/launch/worker_python.hpp"
#include "agent/process/worker_group.hpp"
#include "common/log.hpp"
#include "common/worker_env.hpp"

namespace ctrun::agent {
using namespace checkpoint;

struct CheckpointKeeper::Impl {
  Impl(boost::asio::io_context& io, const LaunchConfig& config, EventLog& ev, const std::string& root)
      : log(ctrun::log::get("checkpoint")), events(ev), nproc(config.nproc_per_node), spill_dir(config.checkpoint_dir) {
    if (config.checkpoint_memory && *config.checkpoint_memory == 0) {
      off = "in-memory checkpoints are off for this job (ctrun --checkpoint-memory 0)";
      if (!spill_dir.empty())
        log->warn(
            "--checkpoint-dir copies in-memory checkpoints, which --checkpoint-memory 0 "
            "turns off: nothing will be written to {}",
            spill_dir);
      return;
    }
    for (const auto& path : sweep_stale_job_dirs(root)) log->info("removed {} (left by a killed ctrun)", path);
    const MemoryFacts facts = read_memory_facts(root);
    limit = config.checkpoint_memory.value_or(default_checkpoint_memory(facts));
    try {
      dir = std::make_unique<JobDirectory>(static_cast<int>(::getpid()), root);
      notices = std::make_unique<NoticeSocket>(io, dir->path() + "/" + std::string(kNoticeSocket),
                                               [this](const Notice& n) { on_notice(n); });
    } catch (const std::exception& e) {
      off = std::string("in-memory checkpoints are off for this job: ") + e.what();
      log->warn("{}", off);
      notices.reset();
      dir.reset();
      return;
    }
    log->debug("in-memory checkpoints in {}, at most {} on this node ({})", dir->path(), format_bytes(limit),
               config.checkpoint_memory ? "--checkpoint-memory" : describe_default(facts, root));
    if (!config.checkpoint_dir.empty()) {
      SpillSettings settings{
          config.checkpoint_dir, config.checkpoint_dir_every, {worker_python(process_env()).program}, {}};
      // The workers' python and their first PYTHONPATH entries: `-m ctrun_torch.checkpoint.spill` is found as the
      // workers find ctrun_torch.checkpoint.
      if (const std::string dirs = python_dirs(); !dirs.empty()) {
        const char* inherited = std::getenv("PYTHONPATH");
        settings.env["PYTHONPATH"] = dirs + (inherited && *inherited ? std::string(":") + inherited : "");
      }
      spiller = std::make_unique<Spiller>(io, std::move(settings), *dir, events);
    }
  }

  void on_notice(const Notice& n) {
    events.emit(n.event, n.fields);
    if (spiller && n.event == Event::kCheckpointCommit && n.fields.contains("rank") && n.fields.contains("step") &&
        n.fields["rank"].is_number_integer() && n.fields["step"].is_number_integer())
      spiller->committed(n.fields["rank"].get<int>(), n.fields["step"].get<std::int64_t>());
  }

  // What a worker of the current attempt is told: where everything is, or why checkpoints are off.
  void add_env(const Worker&, std::map<std::string, std::string>& env) const {
    if (!attempt_off.empty() || !off.empty()) {
      env[worker_env::kCheckpointOff] = off.empty() ? attempt_off : off;
      return;
    }
    env[worker_env::kCheckpointDir] = dir->path();
    env[worker_env::kCheckpointMemory] = std::to_string(limit);
    env[worker_env::kCheckpointStore] = store_address;
    env[worker_env::kCheckpointKeys] = keys;
    env[worker_env::kCheckpointListed] = listed ? "1" : "0";
    if (!spill_dir.empty()) env[worker_env::kCheckpointSpillDir] = spill_dir;
  }

  void begin_attempt(int restart_count, const rdzv::RoundInfo& round, const std::optional<StoreSite>& store) {
    first_rank = round.base_global_rank;
    ranks = nproc;
    attempt_off.clear();
    if (!dir) return;
    const Reconciled r = dir->reconcile();
    if (r.partial_files > 0)
      log->info("removed {} torn checkpoint save(s) ({}) of the previous attempt", r.partial_files,
                format_bytes(r.partial_bytes));
    attempt_off = why_off(round, store);
    if (!attempt_off.empty()) return;
    if (spiller) {
      std::vector<int> local;
      for (int rank = first_rank; rank < first_rank + ranks; ++rank) local.push_back(rank);
      spiller->begin_attempt(local, round.global_world_size);
    }
    store_address = store->address;
    keys = held_keys(restart_count);
    nlohmann::json held = nlohmann::json::object();
    std::map<int, std::vector<std::int64_t>> per_rank;
    for (int rank = first_rank; rank < first_rank + ranks; ++rank) {
      per_rank[rank] = held_steps(rank);
      held[std::to_string(rank)] = per_rank[rank];
    }
    // Keys only when something is held: a job that never saves keeps the store torch would give it (num_keys).
    listed = std::any_of(per_rank.begin(), per_rank.end(), [](const auto& r) { return !r.second.empty(); });
    if (listed) {
      for (const auto& [rank, steps] : per_rank) store->set(keys + std::to_string(rank), encode_steps(steps));
    }
    // The lists just read, not a second scan of every rank's directory before the workers start.
    std::vector<std::vector<std::int64_t>> lists;
    for (const auto& [rank, steps] : per_rank) lists.push_back(steps);
    const auto resume = newest_common_step(lists);
    events.emit(Event::kCheckpointHeld, {{"restart_count", restart_count},
                                         {"held", held},
                                         {"torn_saves_removed", r.partial_files},
                                         {"bytes", dir->used_bytes()},
                                         {"resume_step", resume ? nlohmann::json(*resume) : nlohmann::json()}});
  }

  // Why an attempt cannot have checkpoints although the job can ("" when it can).
  static std::string why_off(const rdzv::RoundInfo& round, const std::optional<StoreSite>& store) {
    // Phase 1 lists ranks only in this node's own store: the ranks of other nodes would find no list there.
    if (round.group_world_size > 1)
      return "in-memory checkpoints are for single-node jobs in this version of ctrun (this job has " +
             std::to_string(round.group_world_size) + " nodes)";
    if (!store) return "in-memory checkpoints need the workers' store on this node (not the case on this node)";
    return "";
  }

  std::vector<std::int64_t> held_steps(int rank) const {
    std::vector<std::int64_t> steps;
    for (const HeldStep& h : dir->held(rank)) steps.push_back(h.step);
    return steps;
  }

  std::optional<std::int64_t> resume_step() const {
    if (!dir || ranks <= 0) return std::nullopt;
    std::vector<std::vector<std::int64_t>> per_rank;
    for (int rank = first_rank; rank < first_rank + ranks; ++rank) per_rank.push_back(held_steps(rank));
    return newest_common_step(per_rank);
  }

  std::shared_ptr<spdlog::logger> log;
  EventLog& events;
  int nproc = 0;            // local ranks of every attempt
  std::string off;          // why checkpoints are off for the whole job ("" when on)
  std::string attempt_off;  // why they are off for this attempt
  std::uint64_t limit = 0;
  std::unique_ptr<JobDirectory> dir;
  std::unique_ptr<NoticeSocket> notices;  // after dir: closed before the directory goes
  std::unique_ptr<Spiller> spiller;       // --checkpoint-dir; after dir: its process is killed before the dir goes
  std::string spill_dir;                  // --checkpoint-dir, told to the workers (ck.load() falls back to it)
  std::string store_address;
  std::string keys;
  bool listed = false;  // this attempt's held steps were written under `keys`
  int first_rank = 0;
  int ranks = 0;
};

CheckpointKeeper::CheckpointKeeper(boost::asio::io_context& io, const LaunchConfig& config, WorkerGroup& group,
                                   EventLog& events, const std::string& root)
    : impl_(std::make_unique<Impl>(io, config, events, root)) {
  WorkerHooks hooks;
  hooks.before_start = [impl = impl_.get()](const Worker& w, std::map<std::string, std::string>& env) {
    impl->add_env(w, env);
  };
  hooks.helpers = [impl = impl_.get()] { return impl->spiller ? impl->spiller->helpers() : std::vector<pid_t>{}; };
  group.add_hooks(std::move(hooks));
}

CheckpointKeeper::~CheckpointKeeper() = default;

void CheckpointKeeper::begin_attempt(int restart_count, const rdzv::RoundInfo& round,
                                     const std::optional<StoreSite>& store) {
  impl_->begin_attempt(restart_count, round, store);
}

std::optional<std::int64_t> CheckpointKeeper::resume_step() const { return impl_->resume_step(); }

std::optional<std::string> CheckpointKeeper::resume_line(bool job_ends) const {
  const auto step = resume_step();
  if (!step) return std::nullopt;
  if (job_ends && !impl_->spill_dir.empty())
    return fmt::format(
        "every rank of this node held step {} in memory; it goes with this run, and a new run with "
        "--checkpoint-dir {} resumes from the newest step copied there",
        *step, impl_->spill_dir);
  if (job_ends)
    return fmt::format(
        "every rank of this node held step {} in memory; it goes with this run (--checkpoint-dir keeps copies on "
        "storage)",
        *step);
  return fmt::format("the next attempt can resume from step {} (held in memory by every rank of this node)", *step);
}

std::string CheckpointKeeper::directory() const { return impl_->dir ? impl_->dir->path() : ""; }

}  // namespace ctrun::agent
