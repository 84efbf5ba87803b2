#include "agent/status/node_records.hpp"

#include <algorithm>

#include <spdlog/spdlog.h>

#include "agent/base/helper_lane.hpp"
#include "agent/status/keys.hpp"
#include "common/log.hpp"

namespace ctrun::agent::status {

struct NodeRecords::State {
  HelperLane& lane;
  std::function<std::string()> record;
  std::function<void(std::map<int, std::string>)> received;
  std::uint64_t attempt = 0;  // 0: none runs
  int restart_count = 0;
  rdzv::RoundInfo round;
  bool busy = false;
  double last = -1e9;
};

NodeRecords::NodeRecords(HelperLane& lane, std::function<std::string()> record,
                         std::function<void(std::map<int, std::string>)> received)
    : state_(std::make_shared<State>(State{lane, std::move(record), std::move(received)})) {}

NodeRecords::~NodeRecords() { state_->attempt = 0; }

void NodeRecords::begin_attempt(std::uint64_t attempt, int restart_count, const rdzv::RoundInfo& round) {
  state_->attempt = attempt;
  state_->restart_count = restart_count;
  state_->round = round;
  if (round.group_rank == 0) state_->received({});  // every node publishes again for this attempt
}

void NodeRecords::end_attempt() { state_->attempt = 0; }

void NodeRecords::tick(double now_s) {
  auto& s = *state_;
  if (s.attempt == 0 || s.round.group_world_size <= 1 || !s.round.store || s.busy) return;
  if (now_s - s.last < std::max(2.0, static_cast<double>(s.round.group_world_size) / 20.0)) return;
  s.last = now_s;
  const std::string record = s.record();
  if (record.empty()) return;
  s.busy = true;
  const bool aggregator = s.round.group_rank == 0;
  s.lane.run(BlockingCall::kProgress, [state = state_, store = s.round.store, record, aggregator,
                                        restart = s.restart_count, me = s.round.group_rank,
                                        nodes = s.round.group_world_size, attempt = s.attempt]() {
    std::map<int, std::string> records;
    try {
      store->set(keys::node_record(restart, me), record);
      for (int n = 0; aggregator && n < nodes; ++n) {
        const std::string key = keys::node_record(restart, n);
        if (n != me && store->check({key})) records[n] = store->get(key);
      }
    } catch (const std::exception& e) {
      log::get("agent")->debug("node record exchange failed: {}", e.what());
    }
    return [state, records = std::move(records), aggregator, attempt]() mutable {
      state->busy = false;
      if (aggregator && state->attempt == attempt) state->received(std::move(records));
    };
  });
}

}  // namespace ctrun::agent::status
