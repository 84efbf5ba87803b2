#include "agent/checkpoint/exchange.hpp"

#include <algorithm>
#include <set>
#include <stdexcept>

#include <nlohmann/json.hpp>

namespace ctrun::agent::checkpoint {
namespace {

nlohmann::json steps_json(const std::map<int, std::vector<std::int64_t>>& per_rank) {
  nlohmann::json out = nlohmann::json::object();
  for (const auto& [rank, steps] : per_rank) out[std::to_string(rank)] = steps;
  return out;
}

std::map<int, std::vector<std::int64_t>> steps_from(const nlohmann::json& j) {
  std::map<int, std::vector<std::int64_t>> out;
  for (const auto& [rank, steps] : j.items()) out[std::stoi(rank)] = steps.get<std::vector<std::int64_t>>();
  return out;
}

bool holds(const std::map<int, std::vector<std::int64_t>>& per_rank, int rank, std::int64_t step) {
  auto it = per_rank.find(rank);
  return it != per_rank.end() && std::find(it->second.begin(), it->second.end(), step) != it->second.end();
}

}  // namespace

std::string record_key(int restart_count, int group_rank) {
  return "ctrun/checkpoint/attempt_" + std::to_string(restart_count) + "/node/" + std::to_string(group_rank);
}

std::string encode_record(const NodeRecord& r) {
  return nlohmann::json{
      {"v", 1},       {"group_rank", r.group_rank},        {"endpoint", r.endpoint},
      {"off", r.off}, {"own", steps_json(r.holdings.own)}, {"replicas", steps_json(r.holdings.replicas)}}
      .dump();
}

NodeRecord decode_record(const std::string& text) {
  try {
    const auto j = nlohmann::json::parse(text);
    if (j.at("v").get<int>() != 1) throw std::runtime_error("version " + j.at("v").dump());
    NodeRecord r;
    r.group_rank = j.at("group_rank").get<int>();
    r.endpoint = j.at("endpoint").get<std::string>();
    r.off = j.at("off").get<std::string>();
    r.holdings.own = steps_from(j.at("own"));
    r.holdings.replicas = steps_from(j.at("replicas"));
    return r;
  } catch (const std::exception& e) {
    throw std::runtime_error(std::string("another node's checkpoint record is unreadable (") + e.what() +
                             "); run the same ctrun version on every node");
  }
}

std::vector<NodeRecord> exchange_records(store::Store& store, int restart_count, const NodeRecord& self, int nodes,
                                         std::chrono::milliseconds timeout) {
  store.set(record_key(restart_count, self.group_rank), encode_record(self));
  std::vector<std::string> keys;
  for (int node = 0; node < nodes; ++node) keys.push_back(record_key(restart_count, node));
  try {
    store.wait(keys, timeout);
  } catch (const std::exception& e) {
    throw std::runtime_error("not every node wrote its checkpoint record of attempt " + std::to_string(restart_count) +
                             " within " + std::to_string(timeout.count() / 1000) + " s (" + e.what() + ")");
  }
  std::vector<NodeRecord> out;
  for (const auto& text : store.multi_get(keys)) out.push_back(decode_record(text));
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
