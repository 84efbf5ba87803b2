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

}  // namespace

std::string record_key(int restart_count, int group_rank) {
  return "ctrun/checkpoint/attempt_" + std::to_string(restart_count) + "/node/" + std::to_string(group_rank);
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

std::string plan_key(int restart_count, int group_rank) {
  return "ctrun/checkpoint/attempt_" + std::to_string(restart_count) + "/plan/" + std::to_string(group_rank);
}

std::string encode_plan(const NodePlan& p) {
  nlohmann::json holders = nlohmann::json::object();
  for (const auto& [rank, endpoints] : p.holders) holders[std::to_string(rank)] = endpoints;
  return nlohmann::json{{"v", kRecordVersion},
                        {"off", p.off},
                        {"resume", p.resume ? nlohmann::json(*p.resume) : nlohmann::json()},
                        {"listed", p.listed},
                        {"targets", p.targets},
                        {"holders", holders}}
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
    return p;
  } catch (const std::exception& e) {
    throw std::runtime_error(std::string("group rank 0's checkpoint plan is unreadable (") + e.what() +
                             "); run the same ctrun version on every node");
  }
}

std::vector<NodePlan> plan_nodes(const std::vector<NodeRecord>& records, int world_size) {
  std::vector<NodePlan> plans(records.size());
  for (const auto& node : records) {
    if (node.off.empty()) continue;
    for (auto& p : plans) p.off = "node " + std::to_string(node.group_rank) + " has them off (" + node.off + ")";
    return plans;
  }
  const auto steps = merged_steps(records, world_size);
  std::vector<std::vector<std::int64_t>> lists;
  bool listed = false;
  for (const auto& [rank, held] : steps) {
    lists.push_back(held);
    listed = listed || !held.empty();
  }
  const auto resume = newest_common_step(lists);
  const int nodes = static_cast<int>(records.size());
  for (std::size_t i = 0; i < records.size(); ++i) {
    const NodeRecord& node = records[i];
    NodePlan& p = plans[i];
    p.resume = resume;
    p.listed = listed;
    for (int target : ring_targets(node.group_rank, nodes, node.replicas)) {
      for (const auto& other : records)
        if (other.group_rank == target && !other.endpoint.empty()) p.targets.push_back(other.endpoint);
    }
    if (!resume) continue;
    for (int rank = node.first_rank; rank < node.first_rank + node.ranks; ++rank) {
      if (holds(node.holdings.own, rank, *resume) || holds(node.holdings.replicas, rank, *resume)) continue;
      p.holders[rank] = holders_of(records, rank, *resume, node.group_rank);
    }
  }
  return plans;
}

Exchanged exchange_records(store::Store& store, int restart_count, const NodeRecord& self, int nodes,
                           int world_size, std::chrono::milliseconds timeout) {
  store.set(record_key(restart_count, self.group_rank), encode_record(self));
  Exchanged out;
  if (self.group_rank != 0) {
    const std::string mine = plan_key(restart_count, self.group_rank);
    try {
      store.wait({mine}, timeout + kPlanGrace);
    } catch (const store::TimeoutError& e) {
      out.plan.off = "no checkpoint plan from group rank 0's agent for attempt " + std::to_string(restart_count) +
                     " within " + seconds_of(timeout + kPlanGrace) + " s (" + e.what() + ")";
      return out;
    }
    out.plan = decode_plan(store.get(mine));
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
  } catch (const store::TimeoutError&) {
    std::vector<std::string> missing;
    for (int node = 0; node < nodes && missing.size() < 10; ++node)
      if (!store.check({keys[node]})) missing.push_back(std::to_string(node));
    plans.assign(nodes, NodePlan{"not every node wrote its checkpoint record of attempt " +
                                     std::to_string(restart_count) + " within " + seconds_of(timeout) +
                                     " s (missing: node " + text::join(missing, ", ") + ")",
                                 std::nullopt, false, {}, {}});
  } catch (const store::StoreError&) {
    throw;
  } catch (const std::runtime_error& e) {  // a record this version cannot read
    plans.assign(nodes, NodePlan{e.what(), std::nullopt, false, {}, {}});
  }
  std::vector<std::string> plan_keys, values;
  for (int node = 1; node < nodes; ++node) {
    plan_keys.push_back(plan_key(restart_count, node));
    values.push_back(encode_plan(plans[node]));
  }
  if (!plan_keys.empty()) store.multi_set(plan_keys, values);
  out.plan = plans[0];
  return out;
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

}  // namespace ctrun::agent::checkpoint
