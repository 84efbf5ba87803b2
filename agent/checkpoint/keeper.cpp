#include "agent/checkpoint/keeper.hpp"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <map>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <nlohmann/json.hpp>

#include "agent/base/event_log.hpp"
#include "agent/base/helper_lane.hpp"
#include "agent/base/memory_size.hpp"
#include "agent/checkpoint/agreement.hpp"
#include "agent/checkpoint/gather.hpp"
#include "agent/checkpoint/job_directory.hpp"
#include "agent/checkpoint/layout.hpp"
#include "agent/checkpoint/memory_limit.hpp"
#include "agent/checkpoint/notices.hpp"
#include "agent/checkpoint/replica_transfer.hpp"
#include "agent/checkpoint/replicator.hpp"
#include "agent/checkpoint/snapshot_digest.hpp"
#include "agent/checkpoint/spill.hpp"
#include "agent/launch/reachable_address.hpp"
#include "agent/launch/worker_invocation.hpp"
#include "agent/launch/worker_python.hpp"
#include "agent/launch/worker_store.hpp"
#include "agent/process/worker_group.hpp"
#include "common/log.hpp"
#include "common/worker_env.hpp"

namespace ctrun::agent {
using namespace checkpoint;

struct CheckpointKeeper::Impl {
  Impl(boost::asio::io_context& io_context, const LaunchConfig& config, const EnvLookup& env, EventLog& ev,
       const std::string& root)
      : io(io_context),
        log(ctrun::log::get("checkpoint")),
        events(ev),
        nproc(config.workers.nproc_per_node),
        replicas_flag(config.checkpoint.replicas),
        spill_dir(config.checkpoint.dir),
        secret(config.secret) {
    if (config.checkpoint.memory && *config.checkpoint.memory == 0) {
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
    limit = config.checkpoint.memory.value_or(default_checkpoint_memory(facts));
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
               config.checkpoint.memory ? "--checkpoint-memory" : describe_default(facts, root));
    if (!config.checkpoint.dir.empty()) {
      SpillSettings settings{config.checkpoint.dir,
                             config.checkpoint.dir_every,
                             config.checkpoint.dir_every_s,
                             {worker_python(env).program},
                             {}};
      // The workers' python and their first PYTHONPATH entries: `-m ctrun_torch.checkpoint.spill` is found as the
      // workers find ctrun_torch.checkpoint.
      if (const std::string dirs = python_dirs(); !dirs.empty()) {
        const auto inherited = env("PYTHONPATH");
        settings.env["PYTHONPATH"] = dirs + (inherited && !inherited->empty() ? ":" + *inherited : "");
      }
      spiller = std::make_unique<Spiller>(io, std::move(settings), *dir, events);
    }
  }

  void on_notice(const Notice& n) {
    events.emit(n.event, n.fields);
    if (n.event == Event::kCheckpointCommit) maybe_replicate();
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
    env[worker_env::kCheckpointReplicas] = std::to_string(targets.size());
  }

  void begin_attempt(int restart_count, const rdzv::RoundInfo& round, const std::optional<StoreSite>& store,
                     Gathered* gathered) {
    if (gathered && gathered->server) server = std::move(gathered->server);  // made by the first gather
    if (gathered && server && gathered->off.empty()) server->accept_pushes_of(gathered->accepts);
    node_ranks.first = round.base_global_rank;
    node_ranks.count = nproc;
    multi_node = round.group_world_size > 1;
    attempt_off.clear();
    targets.clear();
    queued_step = -1;
    if (!dir) return;
    const Reconciled r = gathered ? gathered->reconciled : dir->reconcile();
    if (r.partial_files > 0)
      log->info("removed {} torn checkpoint save(s) ({}) of the previous attempt", r.partial_files,
                format_bytes(r.partial_bytes));
    attempt_off = why_off(round, store, gathered);
    if (!attempt_off.empty()) {
      if (gathered) log->warn("{}", attempt_off);
      return;
    }
    if (spiller) {
      std::vector<int> local;
      for (int rank = node_ranks.first; rank < node_ranks.first + node_ranks.count; ++rank) local.push_back(rank);
      spiller->begin_attempt(local, round.global_world_size);
    }
    store_address = store->address;
    keys = held_keys(restart_count);
    nlohmann::json held = nlohmann::json::object();
    std::map<int, std::vector<std::int64_t>> per_rank;
    for (int rank = node_ranks.first; rank < node_ranks.first + node_ranks.count; ++rank) {
      held[std::to_string(rank)] = held_steps(rank);
      per_rank[rank] = held_steps(rank);
    }
    // Several nodes: every rank of the job, as every node holds it (own snapshots and replicas), on group rank 0
    // (which lists them); whether any is held comes with every node's part of the plan.
    if (gathered) per_rank = gathered->steps;
    // Keys only when something is held: a job that never saves keeps the store torch would give it (num_keys).
    listed = gathered ? gathered->listed
                      : std::any_of(per_rank.begin(), per_rank.end(), [](const auto& r) { return !r.second.empty(); });
    if (listed && store->set) {
      for (const auto& [rank, steps] : per_rank) store->set(keys + std::to_string(rank), encode_steps(steps));
    }
    // The lists just read, not a second scan of every rank's directory before the workers start.
    std::vector<std::vector<std::int64_t>> lists;
    for (const auto& [rank, steps] : per_rank) lists.push_back(steps);
    const auto resume = gathered ? gathered->resume : newest_common_step(lists);
    nlohmann::json fields = {{"restart_count", restart_count},
                             {"held", held},
                             {"torn_saves_removed", r.partial_files},
                             {"bytes", dir->used_bytes()},
                             {"resume_step", resume ? nlohmann::json(*resume) : nlohmann::json()}};
    if (gathered) {
      nlohmann::json replicas = nlohmann::json::object();
      for (const auto& [rank, steps] : dir->holdings().replicas) replicas[std::to_string(rank)] = steps;
      fields["replicas"] = replicas;
      for (const auto& f : gathered->fetched) events.emit(Event::kCheckpointFetched, f);
    }
    events.emit(Event::kCheckpointHeld, fields);
    if (gathered && !gathered->targets.empty()) {
      targets = gathered->targets;
      if (!replicator) {
        replicator = std::make_unique<Replicator>(
            dir->path(),
            [this, token = std::weak_ptr<int>(alive)](const ReplicationOutcome& out) {
              boost::asio::post(io, [this, token, out] {
                if (token.expired()) return;
                on_replicated(out);
              });
            },
            secret);
      }
      maybe_replicate();  // the new ring's targets may lack this node's newest step
    }
  }

  // This node's newest committed step (every local rank holds it) to the ring's targets, unless already on its way.
  void maybe_replicate() {
    if (!replicator || targets.empty() || !dir) return;
    const auto step = resume_step();
    if (!step || *step <= queued_step) return;
    ReplicationTask task{*step, {}, targets};
    for (int rank = node_ranks.first; rank < node_ranks.first + node_ranks.count; ++rank)
      task.files.emplace_back(
          rank, (std::filesystem::path(dir->path()) / rank_dir_name(rank) / step_file_name(*step)).string());
    queued_step = *step;
    replicator->submit(std::move(task));
  }

  void on_replicated(const ReplicationOutcome& out) {
    if (out.error.empty()) {
      replicated_at = std::chrono::steady_clock::now();
      events.emit(Event::kCheckpointReplicated,
                  {{"step", out.step}, {"bytes", out.bytes}, {"seconds", out.seconds}, {"to", out.to}});
      return;
    }
    log->warn("could not copy checkpoint step {} to another node: {}", out.step, out.error);
    events.emit(Event::kCheckpointReplicationFailed, {{"step", out.step}, {"to", out.to}, {"error", out.error}});
    if (queued_step == out.step) queued_step = -1;  // the next commit (or attempt) tries again
  }

  // Why an attempt cannot have checkpoints although the job can ("" when it can).
  static std::string why_off(const rdzv::RoundInfo& round, const std::optional<StoreSite>& store,
                             const Gathered* gathered) {
    if (gathered && !gathered->off.empty()) return gathered->off;
    if (round.group_world_size > 1 && !gathered)
      return "in-memory checkpoints on several nodes need the nodes' agreement before the attempt (none was made)";
    if (!store) return "in-memory checkpoints need the workers' store (the job's rendezvous gave none)";
    return "";
  }

  std::vector<std::int64_t> held_steps(int rank) const {
    std::vector<std::int64_t> steps;
    for (const HeldStep& h : dir->held(rank)) steps.push_back(h.step);
    return steps;
  }

  std::optional<std::int64_t> resume_step() const {
    if (!dir || node_ranks.count <= 0) return std::nullopt;
    std::vector<std::vector<std::int64_t>> per_rank;
    for (int rank = node_ranks.first; rank < node_ranks.first + node_ranks.count; ++rank)
      per_rank.push_back(held_steps(rank));
    return newest_common_step(per_rank);
  }

  boost::asio::io_context& io;
  std::shared_ptr<spdlog::logger> log;
  EventLog& events;
  int nproc = 0;  // local ranks of every attempt
  std::optional<int> replicas_flag;
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
  struct {
    int first = 0;  // this node's first global rank in the attempt
    int count = 0;  // and how many it runs
  } node_ranks;
  bool multi_node = false;
  std::shared_ptr<const auth::Secret>
      secret;  // the job's (LaunchConfig::secret): every replication connection proves it
  // Cancels a fetch of a gather under way when the agent ends (shared with the helper lane's copy).
  std::shared_ptr<std::atomic<bool>> stopping = std::make_shared<std::atomic<bool>>(false);
  std::unique_ptr<ReplicaServer> server;  // this node's replication endpoint, made by the first gather
  std::vector<std::string> targets;       // this attempt's replication targets
  std::int64_t queued_step = -1;          // the newest step handed to the replicator in this attempt
  std::unique_ptr<Replicator> replicator;
  // When the last copy to the targets completed.
  std::optional<std::chrono::steady_clock::time_point> replicated_at;
  std::shared_ptr<int> alive = std::make_shared<int>(0);  // posted replication outcomes check it
};

CheckpointKeeper::CheckpointKeeper(boost::asio::io_context& io, const LaunchConfig& config, const EnvLookup& env,
                                   WorkerGroup& group, EventLog& events, const std::string& root)
    : impl_(std::make_unique<Impl>(io, config, env, events, root)), config_(config) {
  WorkerHooks hooks;
  hooks.before_start = [impl = impl_.get()](const Worker& w, std::map<std::string, std::string>& env) {
    impl->add_env(w, env);
  };
  hooks.helpers = [impl = impl_.get()] { return impl->spiller ? impl->spiller->helpers() : std::vector<pid_t>{}; };
  group.add_hooks(std::move(hooks));
}

CheckpointKeeper::~CheckpointKeeper() { *impl_->stopping = true; }

void CheckpointKeeper::prepare_attempt(HelperLane& lane, const Attempt& a, std::function<bool()> wanted,
                                       std::function<void()> ready) {
  const auto site = store_site(a);
  if (a.round.group_world_size <= 1) {
    begin_attempt(a.restart_count, a.round, site);
    return ready();
  }
  // Several nodes: the agents agree on the checkpoints every node holds (the round's store, blocking: the helper
  // lane) before any worker starts. The lane works on copies only.
  const Impl& i = *impl_;
  GatherInput in{i.dir ? i.dir->path() : "",
                 i.off,
                 i.limit,
                 i.nproc,
                 i.replicas_flag.value_or(1),
                 i.server ? i.server->endpoint() : "",
                 i.stopping,
                 [config = config_, host = a.store_host, fixed = a.static_multi_node] {
                   return node_listen_host(config, host, fixed);
                 },
                 i.secret};
  lane.run(BlockingCall::kCheckpointExchange,
           [this, in = std::move(in), a, site, wanted = std::move(wanted), ready = std::move(ready)]() mutable {
             auto gathered = gather(in, a.restart_count, a.round);
             return [this, a, site, gathered, wanted = std::move(wanted), ready = std::move(ready)]() {
               if (!wanted()) return;
               begin_attempt(a.restart_count, a.round, site, gathered.get());
               ready();
             };
           });
}

// Where the attempt's ranks list their held checkpoint steps: the workers' store. With several nodes it is group
// rank 0's, which that node's agent writes every rank's list into (the others write nothing there).
std::optional<CheckpointKeeper::StoreSite> CheckpointKeeper::store_site(const Attempt& a) {
  if (a.round.group_world_size > 1) {
    if (a.round.master_addr.empty() || a.round.master_port == 0) return std::nullopt;
    StoreSite site{a.round.master_addr + ":" + std::to_string(a.round.master_port), nullptr};
    if (a.store && a.round.group_rank == 0)
      site.set = [store = a.store](const std::string& key, const std::string& value) { store->set(key, value); };
    return site;
  }
  if (!a.store) return std::nullopt;
  return StoreSite{a.store_host + ":" + std::to_string(a.store->port()),
                   [store = a.store](const std::string& key, const std::string& value) { store->set(key, value); }};
}

void CheckpointKeeper::begin_attempt(int restart_count, const rdzv::RoundInfo& round,
                                     const std::optional<StoreSite>& store, Gathered* gathered) {
  impl_->begin_attempt(restart_count, round, store, gathered);
}

CheckpointKeeper::Summary CheckpointKeeper::summary() const {
  Summary s;
  const Impl& i = *impl_;
  if (!i.dir) return s;
  s.on = i.off.empty() && i.attempt_off.empty();
  s.newest_step = i.resume_step().value_or(-1);
  for (int rank = i.node_ranks.first; rank < i.node_ranks.first + i.node_ranks.count; ++rank) {
    for (const auto step : i.held_steps(rank))
      if (s.oldest_step < 0 || step < s.oldest_step) s.oldest_step = step;
  }
  if (i.replicated_at)
    s.replicated_age_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - *i.replicated_at).count();
  s.spilling = i.spiller != nullptr;
  if (i.spiller) s.spilled_step = i.spiller->spilled_step();
  s.bytes = i.dir->used_bytes();
  s.limit = i.limit;
  s.replicas = static_cast<int>(i.targets.size());
  if (i.replicator) {
    s.replicated_step = i.replicator->replicated_step();
    s.bytes_sent = i.replicator->bytes_sent();
  }
  if (i.server) s.bytes_received = i.server->bytes_received();
  return s;
}

std::optional<std::int64_t> CheckpointKeeper::resume_step() const { return impl_->resume_step(); }

std::optional<std::string> CheckpointKeeper::resume_line(bool job_ends) const {
  const auto step = resume_step();
  if (!step) return std::nullopt;
  if (impl_->multi_node) {
    const auto replicated = impl_->replicator ? impl_->replicator->replicated_step() : -1;
    const std::string copies =
        replicated >= 0 ? fmt::format("; step {} also on another node", replicated) : "; no copy on another node yet";
    if (job_ends)
      return fmt::format("every rank of this node held step {} in memory{}; it goes with this run", *step, copies);
    return fmt::format(
        "every rank of this node holds step {} in memory{}; the next attempt resumes from the newest step every rank "
        "of the job holds on some node",
        *step, copies);
  }
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
