#include "agent/checkpoint/gather.hpp"

#include <algorithm>
#include <chrono>
#include <filesystem>

#include <spdlog/spdlog.h>

#include "agent/checkpoint/exchange.hpp"
#include "agent/checkpoint/layout.hpp"
#include "agent/checkpoint/replica_transfer.hpp"
#include "agent/checkpoint/snapshot_digest.hpp"
#include "common/log.hpp"
#include "common/text.hpp"

namespace ctrun::agent::checkpoint {
namespace {

namespace fs = std::filesystem;

// How long an agent waits for the other nodes' records: they are written as soon as each agent's round completes.
constexpr auto kExchangeTimeout = std::chrono::seconds(60);

std::vector<std::int64_t> held_steps(const JobDirectory& dir, int rank) {
  std::vector<std::int64_t> steps;
  for (const HeldStep& h : dir.held(rank)) steps.push_back(h.step);
  return steps;
}

// Makes `step` of `rank` a snapshot of this node's rank directory: already there, a replica this node received
// (moved, once its digest matches), or fetched from one of `holders` (checked the same way). A failure is logged
// and returned false.
bool bring(const GatherInput& in, const JobDirectory& dir, int rank, std::int64_t step,
           const std::vector<std::string>& holders, Gathered& g) {
  const auto have = held_steps(dir, rank);
  if (std::find(have.begin(), have.end(), step) != have.end()) return true;
  const auto began = std::chrono::steady_clock::now();
  nlohmann::json event = {{"rank", rank}, {"step", step}};
  const fs::path own = fs::path(dir.path()) / rank_dir_name(rank);
  const fs::path replica = fs::path(dir.path()) / replica_dir_name(rank) / step_file_name(step);
  std::error_code ec;
  fs::create_directories(own, ec);
  std::vector<std::string> errors;
  if (fs::exists(replica, ec)) {
    if (const std::string problem = check_snapshot(replica.string(), rank, step); !problem.empty()) {
      errors.push_back("the replica this node held failed its check (" + problem + "); removed");
      fs::remove(replica, ec);
    } else {
      fs::rename(replica, own / step_file_name(step), ec);
      event["from"] = "local replica";
      event["bytes"] = ec ? 0 : fs::file_size(own / step_file_name(step), ec);
      if (ec) errors.push_back(ec.message());
    }
  }
  if (!event.contains("from")) {
    for (const auto& endpoint : holders) {
      try {
        event["bytes"] = fetch_snapshot(endpoint, rank, step, dir.path(), in.limit, *in.stopping, kTransferIdle,
                                        in.secret.get());
        event["from"] = endpoint;
        errors.clear();
        break;
      } catch (const std::exception& e) {
        errors.push_back(endpoint + ": " + e.what());
      }
    }
  }
  if (!event.contains("from") || !errors.empty())
    event["error"] = errors.empty() ? "no node holds it" : text::join(errors, "; ");
  event["seconds"] = std::chrono::duration<double>(std::chrono::steady_clock::now() - began).count();
  if (event.contains("error"))
    log::get("checkpoint")->warn("could not bring step {} of rank {} to this node: {}", step, rank,
                                 event["error"].dump());
  g.fetched.push_back(event);
  return !event.contains("error");
}

}  // namespace

std::shared_ptr<Gathered> gather(const GatherInput& in, int restart_count, const rdzv::RoundInfo& round) {
  auto g = std::make_shared<Gathered>();
  try {
    if (!round.store) throw std::runtime_error("the rendezvous gave no store for the round");
    NodeRecord self{round.group_rank, in.endpoint, in.off, {}, round.base_global_rank, in.nproc, in.replicas};
    std::unique_ptr<JobDirectory> dir = in.dir.empty() ? nullptr : JobDirectory::view(in.dir);
    if (dir) {
      g->reconciled = dir->reconcile();
      if (self.endpoint.empty()) {
        try {
          g->server = std::make_unique<ReplicaServer>(in.dir, in.limit, in.listen_host(), kTransferIdle, in.secret);
          self.endpoint = g->server->endpoint();
        } catch (const std::exception& e) {
          // Said in this node's record: the others learn at once that the attempt runs without checkpoints,
          // instead of waiting the exchange's timeout for a record that never comes.
          self.off = e.what();
        }
      }
      if (self.off.empty()) self.holdings = dir->holdings();
    }
    auto log = log::get("checkpoint");
    log->debug("checkpoint exchange of attempt {} (round {}): this node's record, then {}", restart_count, round.round,
               round.group_rank == 0 ? "every node's" : "its part of group rank 0's plan");
    Exchanged ex = exchange_records(*round.store, restart_count, self, round.group_world_size,
                                    round.global_world_size, kExchangeTimeout);
    log->debug("checkpoint exchange of attempt {} done: {}", restart_count,
               ex.plan.off.empty() ? "resume step " + (ex.plan.resume ? std::to_string(*ex.plan.resume) : "none")
                                   : ex.plan.off);
    g->steps = std::move(ex.steps);
    NodePlan plan = std::move(ex.plan);
    // Bring this node's ranks' resume step; when some step could not be brought intact anywhere, group rank 0 plans
    // again without it (at most once per step a rank holds: each re-plan leaves one more out).
    for (int iteration = 0;; ++iteration) {
      if (!plan.off.empty()) throw std::runtime_error(plan.off);
      g->listed = plan.listed;
      g->resume = plan.resume;
      g->targets = plan.targets;
      g->accepts = plan.accepts;
      if (!g->resume) break;
      if (int dropped = dir->drop_steps_above(*g->resume); dropped > 0)
        log->info("removed {} snapshot(s) above step {}, the step the job resumes from", dropped, *g->resume);
      Unbrought mine;
      for (const auto& [rank, holders] : plan.holders)
        if (!bring(in, *dir, rank, *g->resume, holders, *g)) mine.emplace_back(rank, *g->resume);
      if (!plan.brings) break;  // nobody brought anything: nothing can have failed
      Unbrought refused;
      auto next = settle_brings(*round.store, restart_count, iteration, round.group_rank, mine,
                                round.group_world_size, round.global_world_size, ex.planner, kExchangeTimeout,
                                refused);
      for (const auto& [rank, step] : refused) {
        log->warn("no intact copy of step {} of rank {} could be brought to its node: the job resumes from an older "
                  "step that every rank holds intact",
                  step, rank);
        if (auto it = g->steps.find(rank); it != g->steps.end()) std::erase(it->second, step);  // the workers' list
      }
      if (!next) break;
      plan = std::move(*next);
    }
  } catch (const std::exception& e) {
    g->off = in.off.empty() ? std::string("in-memory checkpoints are off for this attempt: ") + e.what() : in.off;
  }
  return g;
}

}  // namespace ctrun::agent::checkpoint
