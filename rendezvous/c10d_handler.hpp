#pragma once
// The c10d (dynamic, elastic) backend: JoinOp for rounds, Liveness on its own thread and store connection for
// heartbeats, and O(1) store checks for the agent's polls. Built by create_handler() (factory.hpp); tests build it
// directly over a MemoryStore.

#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>

#include "rendezvous/clock.hpp"
#include "rendezvous/handler.hpp"
#include "rendezvous/join_op.hpp"
#include "rendezvous/liveness.hpp"
#include "rendezvous/parameters.hpp"
#include "rendezvous/presence.hpp"

namespace spdlog {
class logger;
}

namespace ctrun::rdzv {

struct C10dConfig {
  std::string run_id;
  int min_nodes = 1;
  int max_nodes = 1;
  C10dSettings settings;
  // Longest single store WAIT: waiters re-check whether the run was closed at least this often.
  store::Duration wait_slice = std::chrono::seconds(10);
  // What backend() reports: "c10d" (a TCPStore), or "etcd" (the same state machine on etcd_store.hpp).
  std::string backend = "c10d";
  std::string served_store;  // host:port when this handler's process serves the store (Handler::served_store)
  // etcd: this member's presence keys (presence.hpp), watched by the loss thread; null: none (c10d)
  std::shared_ptr<Presence> presence;
};

class C10dHandler final : public Handler {
 public:
  // `connect` opens a store connection; it is called three times (joins/polls, heartbeats, closed connections or
  // etcd's member leases) so that a blocking WAIT of next_rendezvous() never delays a heartbeat. `keep_alive` holds
  // what the store needs (a hosted server).
  using Connect = std::function<std::shared_ptr<store::Store>()>;
  C10dHandler(C10dConfig config, NodeSpec node, const Connect& connect, std::shared_ptr<const Clock> clock = nullptr,
              std::shared_ptr<void> keep_alive = nullptr);
  ~C10dHandler() override;

  void set_worker_store_address(const std::string& host, std::uint16_t port) override;
  RoundInfo next_rendezvous() override;
  int num_nodes_waiting() override;
  bool round_broken() override;
  std::string restart_reason() override;
  bool exit_barrier(store::Duration timeout) override;
  bool is_closed() override;
  void set_closed() override;
  bool shutdown() override;
  void leave() override;
  FailureClaim claim_failure() override;
  void step_out(const std::string& why) override;
  void abandon() override;
  std::string run_id() const override { return config_.run_id; }
  std::string backend() const override { return config_.backend; }
  bool use_agent_store() const override { return true; }
  std::string served_store() const override { return config_.served_store; }

 private:
  std::string over_value();
  void heartbeat_loop();
  void loss_loop();      // waits for members' closed connections (loss_watch.hpp) on a connection of its own
  void presence_loop();  // instead, where the store has presence keys (presence_watch.hpp): polls them
  void release_presence();
  void stop_heartbeats();
  void release_store();
  void withdraw(store::Store& store, std::uint64_t round, std::int64_t arrival, const std::string& why);

  C10dConfig config_;
  NodeSpec node_;
  Keys keys_;
  std::shared_ptr<void> keep_alive_;
  Connect connect_;  // abandon() opens a connection of its own (the agent thread's may be blocked in a WAIT)
  std::shared_ptr<const Clock> clock_;
  // Taken once: log::get() locks two process-wide mutexes, which N handlers of one process (tests, rdzv_bench)
  // completing a round together would queue on.
  std::shared_ptr<spdlog::logger> log_;
  std::shared_ptr<store::Store> store_;     // joins, polls, barriers (agent thread)
  std::shared_ptr<store::Store> hb_store_;  // heartbeats (heartbeat thread)
  std::string worker_store_host_;
  std::uint16_t worker_store_port_ = 0;
  std::optional<Membership> current_;
  std::string over_cache_;  // over(r) never changes once set: poll with CHECK until then, never after
  int waiting_cache_ = 0;
  bool exit_barrier_passed_ = false;  // this round's exit barrier completed: every member will shut down

  std::mutex mutex_;                // guards liveness_, stopping_, held_, joining_ and stepping_
  std::optional<Membership> held_;  // current_, for abandon()
  std::optional<std::pair<std::uint64_t, std::int64_t>> joining_;  // (round, arrival) of a join under way
  std::condition_variable wake_;
  // A join step is talking to the store: its arrival ADD may have landed before joining_ says so. abandon() waits
  // for the step (bounded) so that an arrival is never left behind as a ghost member of the next round.
  bool stepping_ = false;
  bool abandoned_ = false;  // abandon() ran: next_rendezvous() starts no further step
  std::condition_variable step_done_;
  Liveness liveness_;
  bool stopping_ = false;
  std::thread heartbeat_thread_;
  std::shared_ptr<store::Store> loss_store_;  // the loss thread's connection
  bool loss_stopping_ = false;                // guarded by mutex_; set by the destructor only
  std::thread loss_thread_;
};

}  // namespace ctrun::rdzv
