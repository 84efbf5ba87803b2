#include "agent/checkpoint/exchange.hpp"

#include <algorithm>
#include <set>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "agent/checkpoint/agreement.hpp"
#include "common/text.hpp"

namespace ctrun::agent::checkpoint {
namespace {

nlohmann::json steps_json(const std::map<int, std::vector<std::int64_t>>& per_rank) {
  nlohmann::json out = nlohmann::json::object();
  for (const auto& [rank, steps] : per_rank) out[std::to_string(rank)] = steps;
  return out;
}

std::map<int, std::vector<std::int64_t>> steps_from(const nlohmann::json& j) {
  std::map<int, std::vector<std::int64_t>> out;
  for (const auto& [rank, steps] : j.items()) {
    const auto r = text::parse_int<int>(rank);
    if (!r) throw std::runtime_error("rank '" + rank + "' is not a number");
    out[*r] = steps.get<std::vector<std::int64_t>>();
  }
  return out;
}

bool holds(const std::map<int, std::vector<std::int64_t>>& per_rank, int rank, std::int64_t step) {
  auto it = per_rank.find(rank);
  return it != per_rank.end() && std::find(it->second.begin(), it->second.end(), step) != it->second.end();
}

constexpr int kRecordVersion = 2;
// A node waits for its part of the plan this much longer than group rank 0 waits for the records: a plan that says
// "off" for a missing record reaches it before its own wait ends.
constexpr auto kPlanGrace = std::chrono::seconds(10);

std::string seconds_of(std::chrono::milliseconds t) { return std::to_string(t.count() / 1000); }

std::string attempt_prefix(int restart_count) { return "ctrun/checkpoint/attempt_" + std::to_string(restart_count); }

}  // namespace

std::string record_key(int restart_count, int group_rank) {
  return attempt_prefix(restart_count) + "/node/" + std::to_string(group_rank);
}

std::string encode_record(const NodeRecord& r) {
  return nlohmann::json{{"v", kRecordVersion},
                        {"group_rank", r.group_rank},
                        {"endpoint", r.endpoint},
                        {"off", r.off},
                        {"own", steps_json(r.holdings.own)},
                        {"replicas", steps_json(r.holdings.replicas)},
                        {"first_rank", r.first_rank},
                        {"ranks", r.ranks},
                        {"replica_count", r.replicas}}
      .dump();
}

NodeRecord decode_record(const std::string& text) {
  try {
    const auto j = nlohmann::json::parse(text);
    if (j.at("v").get<int>() != kRecordVersion) throw std::runtime_error("version " + j.at("v").dump());
    NodeRecord r;
    r.group_rank = j.at("group_rank").get<int>();
    r.endpoint = j.at("endpoint").get<std::string>();
    r.off = j.at("off").get<std::string>();
    r.holdings.own = steps_from(j.at("own"));
    r.holdings.replicas = steps_from(j.at("replicas"));
    r.first_rank = j.at("first_rank").get<int>();
    r.ranks = j.at("ranks").get<int>();
    r.replicas = j.at("replica_count").get<int>();
    return r;
  } catch (const std::exception& e) {
    throw std::runtime_error(std::string("another node's checkpoint record is unreadable (") + e.what() +
                             "); run the same ctrun version on every node");
  }
}

namespace {

// The plan of re-plan `iteration` (0: the first) and the keys of the settling after it.
std::string iteration_plan_key(int restart_count, int iteration, int group_rank) {
  return attempt_prefix(restart_count) + (iteration == 0 ? "/plan/" : "/plan_" + std::to_string(iteration) + "/") +
         std::to_string(group_rank);
}
std::string unbrought_key(int restart_count, int iteration, int group_rank) {
  return attempt_prefix(restart_count) + "/unbrought_" + std::to_string(iteration) + "/" + std::to_string(group_rank);
}
std::string settled_key(int restart_count, int iteration) {
  return attempt_prefix(restart_count) + "/settled_" + std::to_string(iteration);
}

nlohmann::json unbrought_json(const Unbrought& list) {
  nlohmann::json out = nlohmann::json::array();
  for (const auto& [rank, step] : list) out.push_back({rank, step});
  return out;
}
Unbrought unbrought_from(const std::string& text) {
  try {
    Unbrought out;
    for (const auto& pair : nlohmann::json::parse(text))
      out.emplace_back(pair.at(0).get<int>(), pair.at(1).get<std::int64_t>());
    return out;
  } catch (const std::exception& e) {
    throw std::runtime_error(std::string("another node's list of checkpoint steps it could not bring is unreadable (") +
                             e.what() + "); run the same ctrun version on every node");
  }
}

// Group rank 0: writes every other node's part of a plan (one request).
void publish_plans(store::Store& store, int restart_count, int iteration, const std::vector<NodePlan>& plans) {
  std::vector<std::string> keys, values;
  for (std::size_t node = 1; node < plans.size(); ++node) {
    keys.push_back(iteration_plan_key(restart_count, iteration, static_cast<int>(node)));
    values.push_back(encode_plan(plans[node]));
  }
  if (!keys.empty()) store.multi_set(keys, values);
}

// Another node: its part of a plan, or a plan that says why there is none in time.
NodePlan await_plan(store::Store& store, int restart_count, int iteration, int self,
                    std::chrono::milliseconds timeout) {
  const std::string mine = iteration_plan_key(restart_count, iteration, self);
  try {
    store.wait({mine}, timeout + kPlanGrace);
  } catch (const store::TimeoutError& e) {
    NodePlan p;
    p.off = "no checkpoint plan from group rank 0's agent for attempt " + std::to_string(restart_count) + " within " +
            seconds_of(timeout + kPlanGrace) + " s (" + e.what() + ")";
    return p;
  }
  return decode_plan(store.get(mine));
}

}  // namespace

std::string plan_key(int restart_count, int group_rank) { return iteration_plan_key(restart_count, 0, group_rank); }

std::string encode_plan(const NodePlan& p) {
  nlohmann::json holders = nlohmann::json::object();
  for (const auto& [rank, endpoints] : p.holders) holders[std::to_string(rank)] = endpoints;
  return nlohmann::json{{"v", kRecordVersion},
                        {"off", p.off},
                        {"resume", p.resume ? nlohmann::json(*p.resume) : nlohmann::json()},
                        {"listed", p.listed},
                        {"targets", p.targets},
                        {"holders", holders},
                        {"accepts", p.accepts},
                        {"brings", p.brings}}
      .dump();
}

NodePlan decode_plan(const std::string& text) {
  try {
    const auto j = nlohmann::json::parse(text);
    if (j.at("v").get<int>() != kRecordVersion) throw std::runtime_error("version " + j.at("v").dump());
    NodePlan p;
    p.off = j.at("off").get<std::string>();
    if (!j.at("resume").is_null()) p.resume = j.at("resume").get<std::int64_t>();
    p.listed = j.at("listed").get<bool>();
    p.targets = j.at("targets").get<std::vector<std::string>>();
    for (const auto& [rank, endpoints] : j.at("holders").items()) {
      const auto r = text::parse_int<int>(rank);
      if (!r) throw std::runtime_error("rank '" + rank + "' is not a number");
      p.holders[*r] = endpoints.get<std::vector<std::string>>();
    }
    p.accepts = j.at("accepts").get<std::set<int>>();
    p.brings = j.at("brings").get<bool>();
    return p;
  } catch (const std::exception& e) {
    throw std::runtime_error(std::string("group rank 0's checkpoint plan is unreadable (") + e.what() +
                             "); run the same ctrun version on every node");
  }
}

namespace {

// Who holds `step` of each rank, endpoints in the records' order: own snapshots, then replicas (holders_of for every
// rank at once: one pass over the records, where asking holders_of for each rank that must bring walks every record
// again, O(N^2) for a job whose nodes all bring).
struct HoldersIndex {
  std::map<int, std::vector<std::pair<int, const std::string*>>> own, replicas;  // rank -> (group rank, endpoint)

  HoldersIndex(const std::vector<NodeRecord>& records, std::int64_t step) {
    for (const auto& node : records) {
      if (node.endpoint.empty()) continue;
      for (auto [per_rank, into] : {std::pair{&node.holdings.own, &own}, std::pair{&node.holdings.replicas, &replicas}})
        for (const auto& [rank, steps] : *per_rank)
          if (std::find(steps.begin(), steps.end(), step) != steps.end())
            (*into)[rank].emplace_back(node.group_rank, &node.endpoint);
    }
  }
  std::vector<std::string> of(int rank, int self) const {
    std::vector<std::string> out;
    for (const auto* index : {&own, &replicas}) {
      auto it = index->find(rank);
      if (it == index->end()) continue;
      for (const auto& [group_rank, endpoint] : it->second)
        if (group_rank != self) out.push_back(*endpoint);
    }
    return out;
  }
};

}  // namespace

// O(N) in the nodes (times their ranks and replicas): every node's targets, the ranks it accepts and the holders of
// what it brings come from indices built once, never from a walk over every record per node.
std::vector<NodePlan> plan_nodes(const std::vector<NodeRecord>& records, int world_size, const Unbrought& refused) {
  std::vector<NodePlan> plans(records.size());
  for (const auto& node : records) {
    if (node.off.empty()) continue;
    for (auto& p : plans) p.off = "node " + std::to_string(node.group_rank) + " has them off (" + node.off + ")";
    return plans;
  }
  auto steps = merged_steps(records, world_size);
  for (const auto& [rank, step] : refused) std::erase(steps[rank], step);
  std::vector<std::vector<std::int64_t>> lists;
  bool listed = false;
  for (const auto& [rank, held] : steps) {
    lists.push_back(held);
    listed = listed || !held.empty();
  }
  const auto resume = newest_common_step(lists);
  const bool brings = resume && anyone_brings(records, *resume);
  const int nodes = static_cast<int>(records.size());
  // Group rank -> the records of that group rank (one each in a round; a map keeps any order and duplicates).
  std::map<int, std::vector<std::size_t>> by_group_rank;
  for (std::size_t i = 0; i < records.size(); ++i) by_group_rank[records[i].group_rank].push_back(i);
  // What each group rank accepts: the ranks of every node whose ring targets it.
  std::map<int, std::set<int>> accepts;
  for (const auto& node : records) {
    for (int target : ring_targets(node.group_rank, nodes, node.replicas))
      for (int rank = node.first_rank; rank < node.first_rank + node.ranks; ++rank) accepts[target].insert(rank);
  }
  std::optional<HoldersIndex> holders;
  if (resume) holders.emplace(records, *resume);
  for (std::size_t i = 0; i < records.size(); ++i) {
    const NodeRecord& node = records[i];
    NodePlan& p = plans[i];
    p.resume = resume;
    p.listed = listed;
    p.brings = brings;
    if (auto it = accepts.find(node.group_rank); it != accepts.end()) p.accepts = it->second;
    for (int target : ring_targets(node.group_rank, nodes, node.replicas)) {
      auto it = by_group_rank.find(target);
      if (it == by_group_rank.end()) continue;
      for (std::size_t other : it->second)
        if (!records[other].endpoint.empty()) p.targets.push_back(records[other].endpoint);
    }
    if (!resume) continue;
    for (int rank = node.first_rank; rank < node.first_rank + node.ranks; ++rank) {
      if (holds(node.holdings.own, rank, *resume) || holds(node.holdings.replicas, rank, *resume)) continue;
      p.holders[rank] = holders->of(rank, node.group_rank);
    }
  }
  return plans;
}

Exchanged exchange_records(store::Store& store, int restart_count, const NodeRecord& self, int nodes, int world_size,
                           std::chrono::milliseconds timeout) {
  store.set(record_key(restart_count, self.group_rank), encode_record(self));
  Exchanged out;
  if (self.group_rank != 0) {
    out.plan = await_plan(store, restart_count, 0, self.group_rank, timeout);
    return out;
  }
  std::vector<std::string> keys;
  for (int node = 0; node < nodes; ++node) keys.push_back(record_key(restart_count, node));
  std::vector<NodePlan> plans;
  try {
    store.wait(keys, timeout);
    std::vector<NodeRecord> records;
    for (const auto& text : store.multi_get(keys)) records.push_back(decode_record(text));
    plans = plan_nodes(records, world_size);
    out.steps = merged_steps(records, world_size);
    out.planner.records = std::move(records);
  } catch (const store::TimeoutError&) {
    std::vector<std::string> missing;
    for (int node = 0; node < nodes && missing.size() < 10; ++node)
      if (!store.check({keys[node]})) missing.push_back(std::to_string(node));
    plans.assign(nodes,
                 NodePlan{"not every node wrote its checkpoint record of attempt " + std::to_string(restart_count) +
                              " within " + seconds_of(timeout) + " s (missing: node " + text::join(missing, ", ") + ")",
                          std::nullopt,
                          false,
                          {},
                          {}});
  } catch (const store::StoreError&) {
    throw;
  } catch (const std::runtime_error& e) {  // a record this version cannot read
    plans.assign(nodes, NodePlan{e.what(), std::nullopt, false, {}, {}});
  }
  publish_plans(store, restart_count, 0, plans);
  out.plan = plans[0];
  return out;
}

std::optional<NodePlan> settle_brings(store::Store& store, int restart_count, int iteration, int self,
                                      const Unbrought& mine, int nodes, int world_size, Planner& planner,
                                      std::chrono::milliseconds timeout, Unbrought& refused) {
  refused.clear();
  store.set(unbrought_key(restart_count, iteration, self), unbrought_json(mine).dump());
  const std::string settled = settled_key(restart_count, iteration);
  if (self != 0) {
    try {
      store.wait({settled}, timeout + kPlanGrace);
    } catch (const store::TimeoutError& e) {
      NodePlan p;
      p.off = "group rank 0's agent did not say within " + seconds_of(timeout + kPlanGrace) +
              " s whether every checkpoint step could be brought (" + e.what() + ")";
      return p;
    }
    refused = unbrought_from(store.get(settled));
    if (refused.empty()) return std::nullopt;
    return await_plan(store, restart_count, iteration + 1, self, timeout);
  }
  std::vector<std::string> keys;
  for (int node = 0; node < nodes; ++node) keys.push_back(unbrought_key(restart_count, iteration, node));
  Unbrought fresh;
  std::vector<NodePlan> plans;
  try {
    store.wait(keys, timeout);
    for (const auto& text : store.multi_get(keys)) {
      const auto list = unbrought_from(text);
      fresh.insert(fresh.end(), list.begin(), list.end());
    }
    std::sort(fresh.begin(), fresh.end());
    fresh.erase(std::unique(fresh.begin(), fresh.end()), fresh.end());
    if (!fresh.empty()) {
      planner.refused.insert(planner.refused.end(), fresh.begin(), fresh.end());
      plans = plan_nodes(planner.records, world_size, planner.refused);
    }
  } catch (const store::TimeoutError&) {
    fresh = {{-1, -1}};  // some node never said: nobody can know the step stands
    plans.assign(nodes, NodePlan{});
    for (auto& p : plans)
      p.off = "not every node said within " + seconds_of(timeout) + " s which checkpoint steps it could not bring";
  } catch (const std::runtime_error& e) {
    if (dynamic_cast<const store::StoreError*>(&e)) throw;
    fresh = {{-1, -1}};
    plans.assign(nodes, NodePlan{});
    for (auto& p : plans) p.off = e.what();
  }
  if (!fresh.empty()) publish_plans(store, restart_count, iteration + 1, plans);
  store.set(settled, unbrought_json(fresh).dump());  // after the plans: a node that reads "again" finds its plan
  if (fresh.empty()) return std::nullopt;
  if (fresh.front().first >= 0) refused = fresh;
  return plans.empty() ? std::nullopt : std::optional<NodePlan>(plans[0]);
}

std::map<int, std::vector<std::int64_t>> merged_steps(const std::vector<NodeRecord>& nodes, int world_size) {
  std::map<int, std::set<std::int64_t>> sets;
  for (int rank = 0; rank < world_size; ++rank) sets[rank];
  for (const auto& node : nodes) {
    for (const auto* per_rank : {&node.holdings.own, &node.holdings.replicas}) {
      for (const auto& [rank, steps] : *per_rank) {
        if (rank < world_size) sets[rank].insert(steps.begin(), steps.end());
      }
    }
  }
  std::map<int, std::vector<std::int64_t>> out;
  for (const auto& [rank, steps] : sets) out[rank].assign(steps.begin(), steps.end());
  return out;
}

std::vector<std::string> holders_of(const std::vector<NodeRecord>& nodes, int rank, std::int64_t step, int self) {
  std::vector<std::string> out;
  for (bool replicas : {false, true}) {
    for (const auto& node : nodes) {
      if (node.group_rank == self || node.endpoint.empty()) continue;
      if (holds(replicas ? node.holdings.replicas : node.holdings.own, rank, step)) out.push_back(node.endpoint);
    }
  }
  return out;
}

std::vector<int> ring_targets(int self, int group_world_size, int count) {
  std::vector<int> out;
  for (int i = 1; i <= count && i < group_world_size; ++i) out.push_back((self + i) % group_world_size);
  return out;
}

std::set<int> ranks_replicated_to(const std::vector<NodeRecord>& nodes, int self) {
  std::set<int> out;
  const int group_world_size = static_cast<int>(nodes.size());
  for (const auto& node : nodes) {
    const auto targets = ring_targets(node.group_rank, group_world_size, node.replicas);
    if (std::find(targets.begin(), targets.end(), self) == targets.end()) continue;
    for (int rank = node.first_rank; rank < node.first_rank + node.ranks; ++rank) out.insert(rank);
  }
  return out;
}

bool anyone_brings(const std::vector<NodeRecord>& nodes, std::int64_t step) {
  for (const auto& node : nodes) {
    for (int rank = node.first_rank; rank < node.first_rank + node.ranks; ++rank)
      if (!holds(node.holdings.own, rank, step)) return true;
  }
  return false;
}

}  // namespace ctrun::agent::checkpoint
