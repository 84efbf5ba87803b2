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

static std::string attempt_prefix(int restart_count) { return "ctrun/checkpoint/attempt_" + std::to_string(restart_count); }

std::string record_key(int restart_count, int group_rank) {
  return attempt_prefix(restart_count) + "/node/" + std::to_string(group_rank);
}

std::string encode_record(const NodeRecord& r) {
  return nlohmann::json{
      {"v", 1},       {"group_rank", r.group_rank},        {"endpoint", r.endpoint},
      {"off", r.off}, {"own", steps_json(r.holdings.own)}, {"replicas", steps_json(r.holdings.replicas)},
      {"first_rank", r.first_rank}, {"ranks", r.ranks}}
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
    r.first_rank = j.value("first_rank", -1);  // absent from an older ctrun's record
    r.ranks = j.value("ranks", 0);
    return r;
  } catch (const std::exception& e) {
    throw std::runtime_error(std::string("another node's checkpoint record is unreadable (") + e.what() +
                             "); run the same ctrun version on every node");
  }
}

namespace {

// Every node's value under "<prefix><group rank>" once all are written (bounded by `timeout`), after writing ours.
std::vector<std::string> exchange(store::Store& store, const std::string& prefix, int self, const std::string& value,
                                  int nodes, std::chrono::milliseconds timeout, const std::string& what) {
  store.set(prefix + std::to_string(self), value);
  std::vector<std::string> keys;
  for (int node = 0; node < nodes; ++node) keys.push_back(prefix + std::to_string(node));
  try {
    store.wait(keys, timeout);
  } catch (const std::exception& e) {
    throw std::runtime_error("not every node wrote its " + what + " within " + std::to_string(timeout.count() / 1000) +
                             " s (" + e.what() + ")");
  }
  return store.multi_get(keys);
}

}  // namespace

std::vector<NodeRecord> exchange_records(store::Store& store, int restart_count, const NodeRecord& self, int nodes,
                                         std::chrono::milliseconds timeout) {
  std::vector<NodeRecord> out;
  for (const auto& text : exchange(store, attempt_prefix(restart_count) + "/node/", self.group_rank, encode_record(self), nodes,
                                   timeout, "checkpoint record of attempt " + std::to_string(restart_count)))
    out.push_back(decode_record(text));
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

std::optional<std::set<int>> ranks_replicated_to(const std::vector<NodeRecord>& nodes, int self, int count) {
  std::set<int> out;
  const int group_world_size = static_cast<int>(nodes.size());
  for (const auto& node : nodes) {
    if (node.first_rank < 0) return std::nullopt;
    const auto targets = ring_targets(node.group_rank, group_world_size, count);
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

Unbrought exchange_failures(store::Store& store, int restart_count, int round, int self, const Unbrought& mine,
                            int nodes, std::chrono::milliseconds timeout) {
  const std::string prefix = attempt_prefix(restart_count) + "/unbrought_" + std::to_string(round) + "/";
  nlohmann::json list = nlohmann::json::array();
  for (const auto& [rank, step] : mine) list.push_back({rank, step});
  Unbrought all;
  for (const auto& text : exchange(store, prefix, self, list.dump(), nodes, timeout,
                                   "list of checkpoint steps it could not bring")) {
    try {
      for (const auto& pair : nlohmann::json::parse(text)) all.emplace_back(pair.at(0).get<int>(), pair.at(1).get<std::int64_t>());
    } catch (const std::exception& e) {
      throw std::runtime_error(std::string("another node's list of steps it could not bring is unreadable (") +
                               e.what() + "); run the same ctrun version on every node");
    }
  }
  std::sort(all.begin(), all.end());
  all.erase(std::unique(all.begin(), all.end()), all.end());
  return all;
}

std::vector<int> ring_targets(int self, int group_world_size, int count) {
  std::vector<int> out;
  for (int i = 1; i <= count && i < group_world_size; ++i) out.push_back((self + i) % group_world_size);
  return out;
}

}  // namespace ctrun::agent::checkpoint
