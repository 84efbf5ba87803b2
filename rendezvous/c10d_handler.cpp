#include "rendezvous/c10d_handler.hpp"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <future>

#include <fmt/format.h>

#include "common/log.hpp"
#include "rendezvous/loss_watch.hpp"
#include "rendezvous/membership.hpp"
#include "rendezvous/peek.hpp"
#include "store/async_wait.hpp"
#include "store/mux_store.hpp"
#include "store/prefix_store.hpp"
#include "store/store_util.hpp"

namespace ctrun::rdzv {
namespace {

JoinConfig join_config(const C10dConfig& c) {
  return JoinConfig{c.run_id, c.min_nodes, c.max_nodes, c.settings.join_timeout, c.settings.last_call_timeout};
}

// The connection as the heartbeats use it: a reconnect waits at most max(interval, 1 s).
std::shared_ptr<store::Store> heartbeat_view(const std::shared_ptr<store::Store>& store, const C10dSettings& s) {
  auto* mux = dynamic_cast<store::MuxStore*>(store.get());
  if (!mux) return store;
  return mux->view(store->timeout(), std::max<store::Duration>(s.keep_alive_interval, std::chrono::seconds(1)));
}

// How often an idle handler looks at its heartbeat state when it follows no round (a round it joins wakes it).
constexpr auto kIdleTick = std::chrono::milliseconds(1000);
// etcd: how often the members' presence keys are polled (presence_watch.hpp).
constexpr auto kPresencePoll = std::chrono::milliseconds(250);
// A thread-waited store (no asynchronous WAIT: MemoryStore, EtcdStore) waits in slices of at most this long.
constexpr store::Duration kFallbackSlice = std::chrono::seconds(1);

}  // namespace

// A join under way: its state machine, and the wait it is in (a store wait and a timer for its deadline or slice,
// whichever comes first resumes it).
struct C10dHandler::Join {
  Join(JoinOp o, Joined d) : op(std::move(o)), done(std::move(d)) {}
  JoinOp op;
  Joined done;
  std::mutex mutex;  // guards what follows
  bool finished = false;
  std::uint64_t episode = 0;  // one per wait: the wait and the timer of an episode resume it once
  std::shared_ptr<store::AsyncWait> wait;
  std::shared_ptr<Runner::Timer> timer;
};

C10dHandler::C10dHandler(C10dConfig config, NodeSpec node, const Connect& connect, std::shared_ptr<const Clock> clock,
                         std::shared_ptr<void> keep_alive)
    : config_(std::move(config)),
      node_(std::move(node)),
      keys_(config_.run_id),
      keep_alive_(std::move(keep_alive)),
      clock_(clock ? std::move(clock) : std::make_shared<SteadyClock>()),
      log_(log::get("rdzv")),
      store_(connect()),
      hb_store_(heartbeat_view(store_, config_.settings)),
      runner_(config_.runner ? config_.runner : std::make_shared<Runner>(1)),
      liveness_(*hb_store_, LivenessConfig{config_.run_id, config_.settings.keep_alive_interval,
                                           config_.settings.keep_alive_max_attempt, /*align_beats=*/true}) {
  if (config_.min_nodes < 1 || config_.min_nodes > config_.max_nodes)
    throw RendezvousError(fmt::format("c10d rendezvous needs 0 < min_nodes <= max_nodes (got {}:{})", config_.min_nodes,
                                      config_.max_nodes));
  if (config_.presence) {
    presence_watch_.emplace(*hb_store_, config_.run_id, config_.presence->ttl());
    std::lock_guard lock(mutex_);
    presence_timer_ = runner_->after(kPresencePoll, scope_.wrap([this] { presence_tick(); }));
  }
}

C10dHandler::~C10dHandler() {
  std::shared_ptr<Join> join;
  {
    // Heartbeats end, but the registrations stay: not left nor shut down, gone (its connection's close is a death
    // to the others, as its etcd presence key's release below).
    std::lock_guard lock(mutex_);
    stopping_ = true;
    if (tick_timer_) tick_timer_->cancel();
    loss_stopping_ = true;
    for (auto* w : {&lost_wait_, &over_wait_})
      if (*w) (*w)->cancel();
    if (presence_timer_) presence_timer_->cancel();
    join = join_;
  }
  if (join) {
    std::lock_guard lock(join->mutex);
    if (join->wait) join->wait->cancel();
    if (join->timer) join->timer->cancel();
  }
  scope_.close();      // no task of this handler runs from here on
  release_presence();  // not left nor shut down: gone, and the others may as well know it at once
}

void C10dHandler::set_worker_store_address(const std::string& host, std::uint16_t port) {
  worker_store_host_ = host;
  worker_store_port_ = port;
}

// ---- joining ----

RoundInfo C10dHandler::next_rendezvous() {
  if (runner_->on_runner_thread())
    throw std::logic_error("C10dHandler::next_rendezvous() called on a runner thread: use begin_rendezvous()");
  auto result = std::make_shared<std::promise<RoundInfo>>();
  auto future = result->get_future();
  begin_rendezvous([result](std::optional<RoundInfo> round, std::exception_ptr error) {
    if (error)
      result->set_exception(error);
    else
      result->set_value(std::move(*round));
  });
  return future.get();
}

void C10dHandler::begin_rendezvous(Joined done) {
  if (worker_store_port_ == 0) {
    done(std::nullopt, std::make_exception_ptr(RendezvousError(
                           "c10d rendezvous: the agent must call set_worker_store_address() with its worker store's "
                           "port before next_rendezvous()")));
    return;
  }
  NodeRecord me{node_.addr, ::getpid(), node_.local_world_size, node_.role, worker_store_host_, worker_store_port_};
  auto previous = current_;
  if (previous) {
    std::lock_guard lock(mutex_);
    previous->over_known = over_round_ == previous->round && over_seen_;
  }
  auto join = std::make_shared<Join>(JoinOp(*store_, join_config(config_), me, previous), std::move(done));
  {
    std::lock_guard lock(mutex_);
    join_ = join;
  }
  runner_->post(scope_.wrap([this, join] { join_step(join); }));
}

// One step of the join (only non-blocking store operations), then either the round or a wait.
void C10dHandler::join_step(const std::shared_ptr<Join>& join) {
  std::variant<JoinResult, JoinWait> step;
  try {
    {
      std::lock_guard lock(mutex_);
      // Left (a death signal): no new arrival may follow the withdrawal.
      if (abandoned_) throw RendezvousError("rendezvous '" + config_.run_id + "': this node left the rendezvous");
      stepping_ = true;
    }
    // Until the step has returned, this node may have arrived without joining_ saying where.
    auto settle = [&] {
      {
        std::lock_guard lock(mutex_);
        stepping_ = false;
        if (join->op.arrival() > 0) joining_.emplace(join->op.round(), join->op.arrival());
      }
      step_done_.notify_all();
    };
    try {
      step = join->op.step(clock_->now());
      settle();
    } catch (...) {
      settle();
      throw;
    }
  } catch (const store::StoreError& e) {
    join_finished(join, std::nullopt,
                  std::make_exception_ptr(RendezvousConnectionError(fmt::format(
                      "rendezvous '{}': the rendezvous store failed: {}. Check that the --rdzv-endpoint host is up.",
                      config_.run_id, e.what()))));
    return;
  } catch (...) {
    join_finished(join, std::nullopt, std::current_exception());
    return;
  }
  if (auto* r = std::get_if<JoinResult>(&step)) {
    std::optional<RoundInfo> round;
    std::exception_ptr error;
    try {
      round = hold(*r);
    } catch (...) {
      error = std::current_exception();
    }
    join_finished(join, std::move(round), error);
    return;
  }
  const auto& wait = std::get<JoinWait>(step);
  const auto now = clock_->now();
  if (wait.until <= now) {
    runner_->post(scope_.wrap([this, join] { join_step(join); }));
    return;
  }
  auto left =
      wait.until == TimePoint::max() ? config_.wait_slice : std::chrono::ceil<store::Duration>(wait.until - now);
  left = std::min(left, config_.wait_slice);
  std::uint64_t episode = 0;
  {
    std::lock_guard lock(join->mutex);
    if (join->finished) return;  // abandoned meanwhile
    episode = ++join->episode;
  }
  auto resume = [this, join, episode, key = wait.key](store::WaitOutcome outcome, const std::string& error) {
    {
      std::lock_guard l(join->mutex);
      if (join->finished || join->episode != episode) return;
      ++join->episode;  // the other of the pair does nothing
      if (join->wait && outcome != store::WaitOutcome::kReady) join->wait->cancel();
      if (join->timer) join->timer->cancel();
    }
    if (outcome == store::WaitOutcome::kReady) join->op.woken(key);  // runs on the runner, as the steps
    join_resume(join, outcome, error);
  };
  std::shared_ptr<store::AsyncWait> store_wait;
  try {
    // The store's thread calls back: the step itself runs on the runner.
    store_wait = store::wait_async(store_, {wait.key},
                                   scope_.wrap([this, resume](store::WaitOutcome outcome, const std::string& error) {
                                     if (outcome == store::WaitOutcome::kCancelled) return;
                                     runner_->post(scope_.wrap([resume, outcome, error] { resume(outcome, error); }));
                                   }),
                                   std::min(left, kFallbackSlice));
  } catch (const store::StoreError& e) {
    runner_->post(scope_.wrap([resume, error = std::string(e.what())] { resume(store::WaitOutcome::kFailed, error); }));
    return;
  }
  // The deadline or the slice passed: step() decides what that means.
  auto timer = runner_->after(left, scope_.wrap([resume] { resume(store::WaitOutcome::kCancelled, {}); }));
  std::lock_guard lock(join->mutex);
  join->wait = store_wait;
  join->timer = timer;
  if (join->finished || join->episode != episode) {  // resumed or abandoned already: nothing may stay pending
    store_wait->cancel();
    timer->cancel();
  }
}

void C10dHandler::join_resume(const std::shared_ptr<Join>& join, store::WaitOutcome outcome, const std::string& error) {
  if (outcome == store::WaitOutcome::kFailed) {
    join_finished(join, std::nullopt,
                  std::make_exception_ptr(RendezvousConnectionError(fmt::format(
                      "rendezvous '{}': the rendezvous store failed: {}. Check that the --rdzv-endpoint host is up.",
                      config_.run_id, error))));
    return;
  }
  join_step(join);
}

void C10dHandler::join_finished(const std::shared_ptr<Join>& join, std::optional<RoundInfo> round,
                                std::exception_ptr error) {
  {
    std::lock_guard lock(join->mutex);
    if (join->finished) return;
    join->finished = true;
  }
  if (error) {
    std::lock_guard lock(mutex_);
    joining_.reset();
  }
  {
    std::lock_guard lock(mutex_);
    if (join_ == join) join_.reset();
  }
  join->done(std::move(round), error);
}

// The round is this node's: follow it (heartbeats, watches) and say so.
RoundInfo C10dHandler::hold(const JoinResult& result) {
  const auto& a = result.assignment;
  current_ = Membership{result.round, a.group_rank, a.group_world_size};
  over_cache_.clear();
  exit_barrier_passed_ = false;
  waiting_cache_ = 0;
  {
    std::lock_guard lock(mutex_);
    liveness_.follow(*current_, clock_->now());
    held_ = current_;
    joining_.reset();
    watch_over_locked(current_->round);
    if (tick_timer_) tick_timer_->cancel();
    schedule_tick_locked(std::chrono::steady_clock::duration::zero());
  }
  log_->info("rendezvous '{}' round {} complete: group rank {} of {}, world size {}, master {}:{}", config_.run_id,
             result.round, a.group_rank, a.group_world_size, a.global_world_size, a.master_addr, a.master_port);
  return round_info(a, result.round, std::make_shared<store::PrefixStore>(keys_.round(result.round) + "agent", store_));
}

// ---- the agent's polls ----

std::string C10dHandler::over_value() {
  if (!current_ || !over_cache_.empty()) return over_cache_;
  {
    std::lock_guard lock(mutex_);
    if (!store_error_.empty()) {
      auto error = std::move(store_error_);
      store_error_.clear();
      throw store::StoreError(error);
    }
    // Watched and not fired: nothing to read.
    if (over_wait_ && over_round_ == current_->round && !over_seen_) return {};
  }
  over_cache_ = peek(*store_, keys_.over(current_->round)).value_or("");
  return over_cache_;
}

int C10dHandler::num_nodes_waiting() {
  const auto value = over_value();
  const auto kind = over_kind(value);
  if (kind == kOverRejoin) return 1;
  if (kind != kOverJoin) return 0;
  if (waiting_cache_ == 0) {  // read once per round end, not per poll
    auto joined = store_->add(keys_.joined(current_->round), 0);
    waiting_cache_ = static_cast<int>(std::max<std::int64_t>(1, joined - current_->members));
  }
  return waiting_cache_;
}

bool C10dHandler::round_broken() {
  const auto value = over_value();
  const auto kind = over_kind(value);
  return !kind.empty() && kind != kOverJoin && kind != kOverRejoin;
}

std::string C10dHandler::restart_reason() { return over_value(); }

// The held round's `over` key, watched so that the polls above read the store only when it changed.
void C10dHandler::watch_over_locked(std::uint64_t round) {
  if (over_wait_) over_wait_->cancel();
  over_wait_.reset();
  over_round_ = round;
  over_seen_ = false;
  try {
    // A native asynchronous WAIT only: a thread per handler waiting in slices would cost more than the polls save.
    over_wait_ = store_->wait_async(
        {keys_.over(round)}, scope_.wrap([this, round](store::WaitOutcome outcome, const std::string& error) {
          if (outcome == store::WaitOutcome::kCancelled) return;
          runner_->post(scope_.wrap([this, round, outcome, error] { on_over(round, outcome, error); }));
        }));
  } catch (const store::StoreError& e) {
    store_error_ = e.what();
  }
}

void C10dHandler::on_over(std::uint64_t round, store::WaitOutcome outcome, const std::string& error) {
  std::lock_guard lock(mutex_);
  if (over_round_ != round || loss_stopping_) return;
  if (outcome == store::WaitOutcome::kReady) {
    over_seen_ = true;
    liveness_.round_over(round);  // its members leave it: no counter of it is worth reading now
    return;
  }
  // The connection was lost: the next poll says so (the agent restarts into a new round, as when a poll itself
  // found the store gone), and reads the store from then on.
  store_error_ = error;
  over_wait_.reset();
}

// ---- the end of a round ----

bool C10dHandler::exit_barrier(store::Duration timeout) {
  if (!current_) return true;
  try {
    if (store_->add(keys_.exit_count(current_->round), 1) >= current_->members)
      store_->set(keys_.exit_done(current_->round), "1");
    store_->wait({keys_.exit_done(current_->round)}, timeout);
    exit_barrier_passed_ = true;
    return true;
  } catch (const store::TimeoutError&) {
    return false;
  } catch (const store::StoreError& e) {
    throw store::StoreError("the exit barrier of rendezvous '" + config_.run_id + "' round " +
                            std::to_string(current_->round) + " failed: " + e.what());
  }
}

bool C10dHandler::is_closed() { return store_->check({keys_.closed()}); }

void C10dHandler::set_closed() {
  // After the exit barrier the store's host may have ended with its job: do not wait read_timeout to find out.
  auto& store = exit_barrier_passed_ ? *hb_store_ : *store_;
  store.compare_set(keys_.closed(), "", fmt::format("closed by {} (pid {})", node_.addr, ::getpid()));
}

bool C10dHandler::shutdown() {
  stop_heartbeats();
  bool closed = true;
  try {
    set_closed();
    release_store();
  } catch (const store::StoreError& e) {
    log_->warn("could not close rendezvous '{}': {}", config_.run_id, e.what());
    closed = false;
  }
  release_presence();  // after `closed` (and the exit barrier, on success): the watchers take it for no death
  return closed;
}

// After a successful round every member closes the run (and stops heartbeats) through the store. The node hosting it
// must not take it down under them: their last calls would retry a refused connection for read_timeout. So every
// member counts itself out, and the host waits (up to close_timeout) until all have.
void C10dHandler::release_store() {
  if (!current_ || !exit_barrier_passed_) return;  // a failure: the others may never get here
  if (hb_store_->add(keys_.released(current_->round), 1) >= current_->members)
    hb_store_->set(keys_.released_all(current_->round), "1");
  if (!keep_alive_) return;
  try {
    store_->wait({keys_.released_all(current_->round)}, config_.settings.close_timeout);
  } catch (const store::TimeoutError&) {
    log_->warn("rendezvous '{}': not every node released the store within close_timeout; stopping it", config_.run_id);
  }
}

void C10dHandler::leave() {
  stop_heartbeats();
  if (!current_) return;
  try {
    mark_exit(*store_, keys_, current_->round, current_->rank, current_->members, "left", kOverLeave,
              fmt::format("node {} (pid {}) left (its agent was stopped)", node_.addr, ::getpid()));
  } catch (const store::StoreError& e) {
    log_->warn("could not leave rendezvous '{}': {}", config_.run_id, e.what());
  }
  release_presence();  // after the exit is recorded: a departure, not a death
}

FailureClaim C10dHandler::claim_failure() {
  FailureClaim claim;
  if (!current_) return claim;
  const auto r = current_->round;
  const std::string me = fmt::format("node {} (pid {})", node_.addr, ::getpid());
  const std::string first = store_->compare_set(keys_.failure(r), "", me);
  claim.first = first == me;
  if (!claim.first) claim.first_node = first;
  // Spares arrived at round r+1 while r ran; members that left r arrive there too, after counting themselves
  // gone: the difference never counts a member as a spare (it may miss one that is on its way).
  const auto spares = store_->add(keys_.joined(r + 1), 0) - store_->add(keys_.gone(r), 0);
  claim.others_go_on = current_->members - 1 >= config_.min_nodes || spares > 0;
  return claim;
}

// As leave(), but the heartbeats and the watches stay for the rounds to come: only this round's beats and ON_CLOSE
// registration go (its later connection close must not read as a death of a round it left).
void C10dHandler::step_out(const std::string& why) {
  if (!current_) return;
  {
    std::lock_guard lock(mutex_);
    liveness_.stop();
    held_.reset();
  }
  try {
    mark_exit(*store_, keys_, current_->round, current_->rank, current_->members, "left", kOverSteppedOut, why);
  } catch (const store::StoreError& e) {
    log_->warn("could not step out of rendezvous '{}': {}", config_.run_id, e.what());
  }
  release_presence();  // after the exit is recorded: a departure; the next round it joins takes a new lease
  current_.reset();
}

// From another thread, while next_rendezvous() or exit_barrier() may wait: the join's wait is withdrawn (its caller
// gets "left") and the round is left on the same connection, whose other requests no WAIT holds back.
void C10dHandler::abandon() {
  std::optional<Membership> held;
  std::optional<std::pair<std::uint64_t, std::int64_t>> joining;
  std::shared_ptr<Join> join;
  {
    // A step in flight may be adding this node's arrival: wait for it (a few store round trips; bounded, as the
    // agent gives leaving 0.5 s in all) so the arrival is withdrawn rather than left for others to wait on.
    std::unique_lock lock(mutex_);
    step_done_.wait_for(lock, std::chrono::milliseconds(300), [&] { return !stepping_; });
    abandoned_ = true;
    held = held_;
    joining = joining_;
    join = join_;
  }
  if (join) {
    {
      std::lock_guard lock(join->mutex);
      ++join->episode;
      if (join->wait) join->wait->cancel();
      if (join->timer) join->timer->cancel();
    }
    join_finished(
        join, std::nullopt,
        std::make_exception_ptr(RendezvousError("rendezvous '" + config_.run_id + "': this node left the rendezvous")));
  }
  if (!held && !joining) return;
  const auto why = fmt::format("node {} (pid {}) left (its agent was stopped)", node_.addr, ::getpid());
  try {
    if (joining) {
      withdraw(*store_, joining->first, joining->second, why);
    } else {
      mark_exit(*store_, keys_, held->round, held->rank, held->members, "left", kOverLeave, why);
    }
  } catch (const std::exception& e) {
    log_->warn("could not leave rendezvous '{}': {}", config_.run_id, e.what());
  }
  release_presence();
}

// Leaves round `round` that this node arrived in (as `arrival`) but that may not have formed yet. If the round is
// still undecided, this node aborts it the way a join timeout does (the others go on to the next round without
// it); if it formed with this node in it, this node leaves it as a member.
void C10dHandler::withdraw(store::Store& store, std::uint64_t round, std::int64_t arrival, const std::string& why) {
  const auto token = "abort " + std::to_string(arrival);
  if (store.compare_set(keys_.decided(round), "", token) == token) {
    store.set(keys_.done(round), "0");
    mark_over(store, keys_, round, kOverLeave, why);
    store.set(keys_.drained(round), "1");
    store.set(keys_.min_reached(round), "1");  // nodes waiting for MIN wake now, not at their next wait slice
    return;
  }
  const auto done = peek(store, keys_.done(round));
  if (!done) return;  // being completed by another node: heartbeats will tell
  const auto members = store::parse_add_operand(keys_.done(round), *done);
  if (arrival > members) return;  // a spare: the round formed without us
  const auto a = Assignment::decode(store.get(keys_.assign(round, arrival)));
  mark_exit(store, keys_, round, a.group_rank, static_cast<int>(members), "left", kOverLeave, why);
}

// ---- heartbeats ----

void C10dHandler::stop_heartbeats() {
  std::lock_guard lock(mutex_);  // a tick holds it while it runs: none runs from here on
  stopping_ = true;
  liveness_.stop();
  if (tick_timer_) tick_timer_->cancel();
}

void C10dHandler::schedule_tick_locked(std::chrono::steady_clock::duration delay) {
  if (stopping_) return;
  tick_timer_ = runner_->after(delay, scope_.wrap([this] { tick(); }));
}

void C10dHandler::tick() {
  std::unique_lock lock(mutex_);
  if (stopping_) return;
  auto next = TimePoint::max();
  try {
    next = liveness_.tick(clock_->now());
  } catch (const std::exception& e) {  // a store hiccup: keep beating, as torchrun (warnings only)
    log_->warn("rendezvous '{}' heartbeat failed: {}", config_.run_id, e.what());
    next = clock_->now() + config_.settings.keep_alive_interval / 4;
  }
  // The round's ON_CLOSE is registered (on the first tick of the round): wait for closed connections.
  if (held_ && liveness_.reports_closes() && lost_round_ != held_->round && !config_.presence)
    watch_lost_locked(*held_);
  using Ticks = std::chrono::steady_clock::duration;
  const Ticks idle = kIdleTick;
  const Ticks wait = next == TimePoint::max() ? idle : next - clock_->now();
  schedule_tick_locked(std::clamp<Ticks>(wait, std::chrono::milliseconds(1), idle));
}

// ---- the loss watch (loss_watch.hpp) ----

void C10dHandler::watch_lost_locked(const Membership& round) {
  lost_round_ = round.round;
  if (lost_wait_) lost_wait_->cancel();
  lost_wait_.reset();
  try {
    lost_wait_ = store::wait_async(hb_store_, {keys_.lost(round.round)},
                                   scope_.wrap([this, round](store::WaitOutcome outcome, const std::string& error) {
                                     if (outcome == store::WaitOutcome::kCancelled) return;
                                     if (outcome == store::WaitOutcome::kFailed)
                                       log_->debug("rendezvous '{}': waiting for closed connections failed: {}",
                                                   config_.run_id, error);
                                     runner_->post(scope_.wrap([this, round, outcome] { on_lost(round, outcome); }));
                                   }),
                                   kFallbackSlice);
  } catch (const store::StoreError& e) {
    lost_round_.reset();  // the next tick tries again
    log_->debug("rendezvous '{}': cannot wait for closed connections: {}", config_.run_id, e.what());
  }
}

void C10dHandler::on_lost(const Membership& round, store::WaitOutcome outcome) {
  std::lock_guard lock(mutex_);
  if (loss_stopping_ || stopping_ || !held_ || held_->round != round.round || lost_round_ != round.round) return;
  if (outcome == store::WaitOutcome::kFailed) {
    lost_round_.reset();  // the connection is being made again: the next tick waits again (the ON_CLOSE with it)
    return;
  }
  // Someone's connection closed: give it kReconnectGrace to come back, then settle. Ranks 0 and 1 settle first: one of
  // them settles any death but theirs (settlers()), and the round is over before the others look; those look later,
  // and only if it is not (their look is the `lost` log: at 16,384 nodes a herd of 16,384 reads in front of the
  // rejoin).
  const auto delay = round.rank <= 1 ? kReconnectGrace : kReconnectGrace + kLateSettle;
  runner_->after(delay, scope_.wrap([this, round] { settle_lost(round); }));
}

void C10dHandler::settle_lost(const Membership& round) {
  {
    std::lock_guard lock(mutex_);
    if (loss_stopping_ || stopping_ || !held_ || held_->round != round.round) return;
    if (over_round_ == round.round && over_seen_) return;  // over already: its members rejoin, nothing to settle
  }
  auto outcome = LossWatch::Outcome::kNothing;
  try {
    const auto& s = config_.settings;
    outcome = LossWatch(*hb_store_, config_.run_id,
                        s.keep_alive_interval * s.keep_alive_max_attempt - s.keep_alive_interval / 2)
                  .settle(round, kReconnectGrace);
  } catch (const std::exception& e) {
    log_->debug("rendezvous '{}': reading closed connections failed: {}", config_.run_id, e.what());
  }
  if (outcome == LossWatch::Outcome::kDeclared)
    log_->warn("rendezvous '{}' round {} is over: a member's agent is gone (its store connection closed)",
               config_.run_id, round.round);
  if (outcome == LossWatch::Outcome::kBlip)
    log_->info("rendezvous '{}' round {}: a member's store connection closed and came back; not a death",
               config_.run_id, round.round);
  // One wake-up per round (the `lost` log exists from now on: a wait for it would return at once). From here the
  // heartbeat has it: this member times its watched ranks' counters, as without ON_SILENCE.
  if (outcome == LossWatch::Outcome::kDeclared) return;
  std::lock_guard lock(mutex_);
  if (!stopping_ && held_ && held_->round == round.round) liveness_.time_heartbeats(round.round);
}

// ---- etcd: the members' presence keys (presence_watch.hpp) ----

void C10dHandler::release_presence() {
  if (config_.presence) config_.presence->release();
}

void C10dHandler::presence_tick() {
  std::optional<Membership> round;
  {
    std::lock_guard lock(mutex_);
    if (loss_stopping_) return;
    if (!stopping_) round = held_;
  }
  if (round) {
    try {
      if (presence_attached_ != round->round) {
        config_.presence->attach(keys_.alive(round->round, round->rank),
                                 fmt::format("{} (pid {})", node_.addr, ::getpid()));
        presence_attached_ = round->round;
      }
      for (int rank : presence_watch_->poll(*round))
        log_->warn("rendezvous '{}' round {} is over: group rank {}'s agent is gone (its etcd lease expired)",
                   config_.run_id, round->round, rank);
    } catch (const std::exception& e) {
      log_->debug("rendezvous '{}': watching the members' etcd leases failed: {}", config_.run_id, e.what());
    }
  }
  std::lock_guard lock(mutex_);
  if (!loss_stopping_) presence_timer_ = runner_->after(kPresencePoll, scope_.wrap([this] { presence_tick(); }));
}

}  // namespace ctrun::rdzv
