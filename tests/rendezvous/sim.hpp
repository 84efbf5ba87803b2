#pragma once
// A deterministic harness for the rendezvous state machines: several nodes' JoinOps over one MemoryStore, a fake
// clock, and a scheduler that steps every node whose awaited key exists or whose deadline passed. No threads, no
// sleeps: every interleaving the test writes is the one that runs.

#include <gtest/gtest.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "rendezvous/clock.hpp"
#include "rendezvous/handler.hpp"
#include "rendezvous/join_op.hpp"
#include "rendezvous/keys.hpp"
#include "rendezvous/liveness.hpp"
#include "store/memory_store.hpp"

namespace ctrun::rdzv::test {

struct SimNode {
  std::string addr;
  std::unique_ptr<JoinOp> op;
  std::optional<JoinResult> result;
  std::optional<JoinWait> wait;
  std::string error;  // what() of the exception that ended the join
  bool closed = false;
  std::unique_ptr<Liveness> liveness;
  bool alive = true;  // a dead node is neither stepped nor ticked
  TimePoint waited_at{};

  Membership membership() const {
    return Membership{result->round, result->assignment.group_rank, result->assignment.group_world_size};
  }
};

class Sim {
 public:
  explicit Sim(JoinConfig config, store::Duration keep_alive = std::chrono::seconds(5), int attempts = 3)
      : config_(std::move(config)), keys_(config_.run_id), keep_alive_(keep_alive), attempts_(attempts) {}

  // A node starts (or, with `rejoin`, re-starts) next_rendezvous.
  int join(const std::string& addr, int local_world_size = 1, const std::string& role = "default") {
    nodes_.push_back(std::make_unique<SimNode>());
    auto& n = *nodes_.back();
    n.addr = addr;
    n.op = std::make_unique<JoinOp>(store_, config_, record(addr, local_world_size, role), std::nullopt);
    n.liveness = std::make_unique<Liveness>(store_, LivenessConfig{config_.run_id, keep_alive_, attempts_});
    return static_cast<int>(nodes_.size()) - 1;
  }
  void rejoin(int i, int local_world_size = 1) {
    auto& n = *nodes_.at(i);
    auto prev = n.membership();
    n.op = std::make_unique<JoinOp>(store_, config_, record(n.addr, local_world_size, "default"), prev);
    n.result.reset();
    n.wait.reset();
  }
  void kill(int i) { nodes_.at(i)->alive = false; }
  // A wait that passes this long with its key missing resumes the join (C10dConfig::wait_slice); none by default.
  void set_wait_slice(store::Duration slice) { slice_ = slice; }

  // Steps nodes until nobody can move without time passing.
  void settle() {
    for (int guard = 0; guard < 100000; ++guard) {
      bool progress = false;
      for (auto& p : nodes_) {
        auto& n = *p;
        if (!n.alive || !n.op || n.result || !n.error.empty()) continue;
        // As C10dHandler: a wait resumes when its key appears (the step is told so), at its deadline, or when a
        // wait slice passes.
        const bool ready = n.wait && store_.check({n.wait->key});
        if (n.wait && !ready &&
            clock_.now() < (slice_ ? std::min(n.wait->until, n.waited_at + *slice_) : n.wait->until))
          continue;
        progress = true;
        if (ready) n.op->woken(n.wait->key);
        try {
          auto s = n.op->step(clock_.now());
          if (auto* r = std::get_if<JoinResult>(&s)) {
            n.result = *r;
            n.liveness->follow(n.membership(), clock_.now());
          } else {
            n.wait = std::get<JoinWait>(s);
            n.waited_at = clock_.now();
          }
        } catch (const RendezvousClosedError& e) {
          n.error = e.what();
          n.closed = true;
        } catch (const RendezvousError& e) {
          n.error = e.what();
        }
      }
      if (!progress) return;
    }
    ADD_FAILURE() << "the join state machine does not settle (livelock)";
  }

  // Moves time forward in steps of `step`, ticking heartbeats of live members and stepping joins.
  void run_for(store::Duration total, store::Duration step = std::chrono::milliseconds(250)) {
    for (store::Duration t{0}; t < total; t += step) {
      clock_.advance(step);
      for (auto& n : nodes_)
        if (n->alive) n->liveness->tick(clock_.now());
      settle();
    }
  }

  SimNode& node(int i) { return *nodes_.at(i); }
  int done_count() const {
    int c = 0;
    for (const auto& n : nodes_) c += n->result ? 1 : 0;
    return c;
  }
  std::string over(std::uint64_t round) {
    return store_.check({keys_.over(round)}) ? store_.get(keys_.over(round)) : std::string();
  }
  store::MemoryStore& store() { return store_; }
  FakeClock& clock() { return clock_; }
  const Keys& keys() const { return keys_; }

 private:
  NodeRecord record(const std::string& addr, int lws, const std::string& role) {
    return NodeRecord{addr, 1000 + static_cast<std::int64_t>(nodes_.size()), lws, role, "store-" + addr, 7000, 0};
  }

  JoinConfig config_;
  Keys keys_;
  store::Duration keep_alive_;
  int attempts_;
  store::MemoryStore store_{std::chrono::seconds(2)};
  FakeClock clock_;
  std::optional<store::Duration> slice_;
  std::vector<std::unique_ptr<SimNode>> nodes_;
};

}  // namespace ctrun::rdzv::test
