#pragma once
// Several nodes, before each attempt's workers start (docs/checkpoint.md, "Several nodes"): the agents agree on what
// every node holds (exchange.hpp, through the round's store) and each brings its local ranks' resume step from the
// node that holds it when it lacks it, checked against its digest (snapshot_digest.hpp); a step no node can bring
// intact is left out and the job resumes from an older one every rank holds intact (exchange.hpp, settle_brings). Blocking: it runs on the helper lane, on what the loop copied into a
// GatherInput; it touches none of the keeper's objects, and its result goes back to the loop, which applies it
// (CheckpointKeeper::begin_attempt). The replication endpoint is made here the first time (binding needs this node's
// listen address, which may need a name lookup) and handed to the keeper with the result.

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "agent/checkpoint/job_directory.hpp"
#include "common/auth/secret.hpp"
#include "rendezvous/handler.hpp"

namespace ctrun::agent::checkpoint {

class ReplicaServer;

// What the loop hands the helper: copies, and a stop flag shared with the keeper (set when the agent ends).
struct GatherInput {
  std::string dir;                 // the job directory ("" when checkpoints are off for the job)
  std::string off;                 // why they are off for the job ("" when on)
  std::uint64_t limit = 0;         // --checkpoint-memory
  int nproc = 0;                   // local ranks
  int replicas = 1;                // --checkpoint-replicas
  std::string endpoint;            // this node's replication endpoint, once made ("" before the first gather)
  std::shared_ptr<const std::atomic<bool>> stopping;
  std::function<std::string()> listen_host;  // where to bind the endpoint (may look a name up)
  std::shared_ptr<const auth::Secret> secret;  // the job's: every replication connection proves it
};

// What the nodes of a round agreed, for the loop.
struct Gathered {
  std::string off;  // why checkpoints are off for the attempt ("" when on)
  Reconciled reconciled;
  std::map<int, std::vector<std::int64_t>> steps;  // group rank 0: every rank of the job's steps some node holds
  bool listed = false;                             // some rank of the job holds some step
  std::optional<std::int64_t> resume;
  std::vector<std::string> targets;     // this node's replication targets (endpoints)
  std::set<int> accepts;                // the ranks whose replicas this node takes in this attempt
  std::vector<nlohmann::json> fetched;  // checkpoint_fetched events
  std::unique_ptr<ReplicaServer> server;  // the endpoint, when this gather made it (the keeper keeps it)
};

// Blocking. Never throws: a failure turns checkpoints off for the attempt, saying why (Gathered::off).
std::shared_ptr<Gathered> gather(const GatherInput& input, int restart_count, const rdzv::RoundInfo& round);

}  // namespace ctrun::agent::checkpoint
