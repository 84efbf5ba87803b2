#include "agent/status/node_records.hpp"

#include <algorithm>
#include <set>
#include <vector>

#include <spdlog/spdlog.h>

#include "agent/base/helper_lane.hpp"
#include "agent/status/keys.hpp"
#include "common/log.hpp"
#include "common/text.hpp"
#include "rendezvous/peek.hpp"

namespace ctrun::agent::status {

struct NodeRecords::State {
  HelperLane& lane;
  std::function<std::string()> record;
  std::function<void(std::map<int, std::string>)> received;
  std::uint64_t attempt = 0;  // 0: none runs
  int restart_count = 0;
  rdzv::RoundInfo round;
  bool busy = false;
  bool indexed = false;  // this node's group rank is in the attempt's index
  double last_read = -1e9;
  double last_write = -1e9;
};

namespace {

// The group ranks in an index ("3,0,7,"), without duplicates and without `self`; malformed entries are skipped.
std::vector<int> listed_ranks(const std::string& index, int self, int nodes) {
  std::set<int> ranks;
  for (const auto& entry : text::split_nonempty(index, ',')) {
    const auto rank = text::parse_int<int>(entry);
    if (rank && *rank != self && *rank >= 0 && *rank < nodes) ranks.insert(*rank);
  }
  return {ranks.begin(), ranks.end()};
}

}  // namespace

std::map<int, std::string> exchange_records(store::Store& store, int restart, int me, int nodes,
                                            const RecordsStep& step) {
  std::map<int, std::string> records;
  if (step.write) store.set(keys::node_record(restart, me), step.record);
  if (step.index) store.append(keys::published(restart), std::to_string(me) + ",");
  if (step.read) {
    const auto listed = listed_ranks(rdzv::peek(store, keys::published(restart)).value_or(""), me, nodes);
    std::vector<std::string> wanted;
    for (int n : listed) wanted.push_back(keys::node_record(restart, n));
    if (!wanted.empty()) {
      const auto values = store.multi_get(wanted);
      for (std::size_t i = 0; i < listed.size() && i < values.size(); ++i) records[listed[i]] = values[i];
    }
  }
  return records;
}

NodeRecords::NodeRecords(HelperLane& lane, std::function<std::string()> record,
                         std::function<void(std::map<int, std::string>)> received)
    : state_(std::make_shared<State>(State{lane, std::move(record), std::move(received)})) {}

NodeRecords::~NodeRecords() { state_->attempt = 0; }

void NodeRecords::begin_attempt(std::uint64_t attempt, int restart_count, const rdzv::RoundInfo& round) {
  state_->attempt = attempt;
  state_->restart_count = restart_count;
  state_->round = round;
  state_->indexed = false;
  if (round.group_rank == 0) state_->received({});  // every node publishes again for this attempt
}

void NodeRecords::end_attempt() { state_->attempt = 0; }

void NodeRecords::tick(double now_s) {
  auto& s = *state_;
  if (s.attempt == 0 || s.round.group_world_size <= 1 || !s.round.store || s.busy) return;
  const int nodes = s.round.group_world_size;
  const bool aggregator = s.round.group_rank == 0;
  const bool write = now_s - s.last_write >= std::max(2.0, static_cast<double>(nodes) / 20.0);
  const bool read = aggregator && now_s - s.last_read >= 2.0;
  if (!write && !read) return;
  const std::string record = s.record();
  if (record.empty()) return;
  if (write) s.last_write = now_s;
  if (read) s.last_read = now_s;
  s.busy = true;
  const bool index = write && !s.indexed;
  s.lane.run(BlockingCall::kProgress,
             [state = state_, store = s.round.store, record, write, read, index, restart = s.restart_count,
              me = s.round.group_rank, nodes, attempt = s.attempt]() {
               std::map<int, std::string> records;
               bool indexed = false;
               try {
                 records = exchange_records(*store, restart, me, nodes, {record, write, index, read});
                 indexed = index;
               } catch (const std::exception& e) {
                 log::get("agent")->debug("node record exchange failed: {}", e.what());
               }
               return [state, records = std::move(records), read, indexed, attempt]() mutable {
                 state->busy = false;
                 if (state->attempt != attempt) return;
                 if (indexed) state->indexed = true;
                 if (read) state->received(std::move(records));
               };
             });
}

}  // namespace ctrun::agent::status
