#pragma once
// The c10d (dynamic, elastic) backend: JoinOp for rounds, Liveness for heartbeats, LossWatch for members whose
// connection closed, over ONE store connection. Every activity shares it: the agent's calls, the join's steps, the
// heartbeats, the watches of the round's `lost` and `over` keys, and the round's exchanges (RoundInfo::store). None
// holds a thread while it waits: waits are asynchronous (Store::wait_async; MuxStore has any number pending on its
// one connection) and the background work runs on a Runner (runner.hpp). Built by create_handler() (factory.hpp);
// tests build it directly over a MemoryStore.

#include <condition_variable>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>

#include "rendezvous/clock.hpp"
#include "rendezvous/handler.hpp"
#include "rendezvous/join_op.hpp"
#include "rendezvous/liveness.hpp"
#include "rendezvous/parameters.hpp"
#include "rendezvous/presence.hpp"
#include "rendezvous/presence_watch.hpp"
#include "rendezvous/runner.hpp"
#include "store/store.hpp"

namespace spdlog {
class logger;
}

namespace ctrun::rdzv {

struct C10dConfig {
  std::string run_id;
  int min_nodes = 1;
  int max_nodes = 1;
  C10dSettings settings;
  // Longest single store WAIT of a join: waiters re-check whether the run was closed at least this often.
  store::Duration wait_slice = std::chrono::seconds(10);
  // What backend() reports: "c10d" (a TCPStore), or "etcd" (the same state machine on etcd_store.hpp).
  std::string backend = "c10d";
  std::string served_store;  // host:port when this handler's process serves the store (Handler::served_store)
  // etcd: this member's presence keys (presence.hpp), watched by the loss thread; null: none (c10d)
  std::shared_ptr<Presence> presence;
  // Where the background work runs; null: a runner of one thread of the handler's own.
  std::shared_ptr<Runner> runner;
};

class C10dHandler final : public Handler {
 public:
  // `connect` opens the store connection, once: every activity shares it, so it must serve concurrent callers
  // without one's WAIT holding back another's request (MuxStore, MemoryStore, EtcdStore; not TcpStore).
  // `keep_alive` holds what the store needs (a hosted server).
  using Connect = std::function<std::shared_ptr<store::Store>()>;
  C10dHandler(C10dConfig config, NodeSpec node, const Connect& connect, std::shared_ptr<const Clock> clock = nullptr,
              std::shared_ptr<void> keep_alive = nullptr);
  ~C10dHandler() override;

  void set_worker_store_address(const std::string& host, std::uint16_t port) override;
  RoundInfo next_rendezvous() override;
  // next_rendezvous() without holding the caller's thread: `done` gets the round, or the error (a RendezvousError),
  // on a runner thread; it must not destroy the handler. One join at a time.
  using Joined = std::function<void(std::optional<RoundInfo> round, std::exception_ptr error)>;
  void begin_rendezvous(Joined done);
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
  struct Join;
  void join_step(const std::shared_ptr<Join>& join);
  void join_resume(const std::shared_ptr<Join>& join, store::WaitOutcome outcome, const std::string& error);
  void join_finished(const std::shared_ptr<Join>& join, std::optional<RoundInfo> round, std::exception_ptr error);
  RoundInfo hold(const JoinResult& result);
  std::string over_value();
  void schedule_tick_locked(std::chrono::steady_clock::duration delay);
  void tick();
  void watch_lost_locked(const Membership& round);
  void on_lost(const Membership& round, store::WaitOutcome outcome);
  void settle_lost(const Membership& round);
  void watch_over_locked(std::uint64_t round);
  void on_over(std::uint64_t round, store::WaitOutcome outcome, const std::string& error);
  void presence_tick();
  void release_presence();
  void stop_heartbeats();
  void release_store();
  void withdraw(store::Store& store, std::uint64_t round, std::int64_t arrival, const std::string& why);

  C10dConfig config_;
  NodeSpec node_;
  Keys keys_;
  std::shared_ptr<void> keep_alive_;
  std::shared_ptr<const Clock> clock_;
  // Taken once: log::get() locks two process-wide mutexes, which N handlers of one process (tests, rdzv_bench)
  // completing a round together would queue on.
  std::shared_ptr<spdlog::logger> log_;
  std::shared_ptr<store::Store> store_;  // the one connection: the agent's calls, the join, the watches
  // The same connection for the heartbeats and the loss watch: a reconnect waits at most max(interval, 1 s) (a
  // heartbeat that cannot reach the store within its interval is missed anyway; waiting read_timeout would hold
  // stop_heartbeats(), and so the end of the job, once the store is gone).
  std::shared_ptr<store::Store> hb_store_;
  std::shared_ptr<Runner> runner_;
  std::string worker_store_host_;
  std::uint16_t worker_store_port_ = 0;
  std::optional<Membership> current_;
  std::string over_cache_;  // over(r) never changes once set: read once it is, never after
  int waiting_cache_ = 0;
  bool exit_barrier_passed_ = false;  // this round's exit barrier completed: every member will shut down

  std::mutex mutex_;                // guards everything below (and liveness_, and the background tasks' state)
  std::optional<Membership> held_;  // current_, for abandon() and the background
  std::optional<std::pair<std::uint64_t, std::int64_t>> joining_;  // (round, arrival) of a join under way
  // A join step is talking to the store: its arrival ADD may have landed before joining_ says so. abandon() waits
  // for the step (bounded) so that an arrival is never left behind as a ghost member of the next round.
  bool stepping_ = false;
  bool abandoned_ = false;  // abandon() ran: no further join step starts
  std::condition_variable step_done_;
  std::shared_ptr<Join> join_;  // the join under way
  Liveness liveness_;
  bool stopping_ = false;       // heartbeats stopped (stop_heartbeats)
  bool loss_stopping_ = false;  // the handler is going: the watches stop too
  std::shared_ptr<Runner::Timer> tick_timer_;
  // The watch of the held round's `lost` key (loss_watch.hpp), once its ON_CLOSE is registered.
  std::optional<std::uint64_t> lost_round_;  // the round watched (or settled)
  std::shared_ptr<store::AsyncWait> lost_wait_;
  // The watch of the held round's `over` key: round_broken() and num_nodes_waiting() read the store only once it
  // fired, so that an idle agent's polls cost the store nothing. Where the store has no asynchronous WAIT, every
  // poll is a read, as before.
  std::optional<std::uint64_t> over_round_;
  std::shared_ptr<store::AsyncWait> over_wait_;
  bool over_seen_ = false;
  std::string store_error_;  // the watched connection failed: the next poll says so (the store is lost)
  std::shared_ptr<Runner::Timer> presence_timer_;
  std::optional<PresenceWatch> presence_watch_;
  std::optional<std::uint64_t> presence_attached_;
  TaskScope scope_;  // last: closed first, before the rest goes
};

}  // namespace ctrun::rdzv
