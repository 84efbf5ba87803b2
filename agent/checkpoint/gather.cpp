#include "agent/checkpoint/gather.hpp"

#include <algorithm>
#include <chrono>
#include <filesystem>

#include <spdlog/spdlog.h>

#include "agent/checkpoint/exchange.hpp"
#include "agent/checkpoint/layout.hpp"
#include "agent/checkpoint/replica_transfer.hpp"
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
// (moved), or fetched from one of `holders`. A failure is logged; the rank's ck.load() then says so.
void bring(const GatherInput& in, const JobDirectory& dir, int rank, std::int64_t step,
           const std::vector<std::string>& holders, Gathered& g) {
  const auto have = held_steps(dir, rank);
  if (std::find(have.begin(), have.end(), step) != have.end()) return;
  const auto began = std::chrono::steady_clock::now();
  nlohmann::json event = {{"rank", rank}, {"step", step}};
  const fs::path own = fs::path(dir.path()) / rank_dir_name(rank);
  const fs::path replica = fs::path(dir.path()) / replica_dir_name(rank) / step_file_name(step);
  std::error_code ec;
  fs::create_directories(own, ec);
  if (fs::exists(replica, ec)) {
    fs::rename(replica, own / step_file_name(step), ec);
    event["from"] = "local replica";
    event["bytes"] = ec ? 0 : fs::file_size(own / step_file_name(step), ec);
    if (ec) event["error"] = ec.message();
  } else {
    std::vector<std::string> errors;
    for (const auto& endpoint : holders) {
      try {
        event["bytes"] = fetch_snapshot(endpoint, rank, step, dir.path(), in.limit, *in.stopping);
        event["from"] = endpoint;
        errors.clear();
        break;
      } catch (const std::exception& e) {
        errors.push_back(endpoint + ": " + e.what());
      }
    }
    if (!event.contains("from")) event["error"] = errors.empty() ? "no node holds it" : text::join(errors, "; ");
  }
  event["seconds"] = std::chrono::duration<double>(std::chrono::steady_clock::now() - began).count();
  if (event.contains("error"))
    log::get("checkpoint")->warn("could not bring step {} of rank {} to this node: {}", step, rank,
                                 event["error"].dump());
  g.fetched.push_back(event);
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
          g->server = std::make_unique<ReplicaServer>(in.dir, in.limit, in.listen_host());
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
    if (!ex.plan.off.empty()) throw std::runtime_error(ex.plan.off);
    g->steps = std::move(ex.steps);
    g->listed = ex.plan.listed;
    g->resume = ex.plan.resume;
    if (g->resume) {
      if (int dropped = dir->drop_steps_above(*g->resume); dropped > 0)
        log::get("checkpoint")
            ->info("removed {} snapshot(s) above step {}, the step the job resumes from", dropped, *g->resume);
      for (const auto& [rank, holders] : ex.plan.holders) bring(in, *dir, rank, *g->resume, holders, *g);
    }
    g->targets = std::move(ex.plan.targets);
  } catch (const std::exception& e) {
    g->off = in.off.empty() ? std::string("in-memory checkpoints are off for this attempt: ") + e.what() : in.off;
  }
  return g;
}

}  // namespace ctrun::agent::checkpoint
