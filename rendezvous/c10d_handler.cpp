#include "rendezvous/c10d_handler.hpp"

#include <unistd.h>

#include <algorithm>

#include <fmt/format.h>

#include "common/log.hpp"
#include "rendezvous/loss_watch.hpp"
#include "rendezvous/membership.hpp"
#include "rendezvous/peek.hpp"
#include "rendezvous/presence_watch.hpp"
#include "store/prefix_store.hpp"
#include "store/store_util.hpp"
#include "store/tcp_store.hpp"

namespace ctrun::rdzv {
namespace {

JoinConfig join_config(const C10dConfig& c) {
  return JoinConfig{c.run_id, c.min_nodes, c.max_nodes, c.settings.join_timeout, c.settings.last_call_timeout};
}

}  // namespace

C10dHandler::C10dHandler(C10dConfig config, NodeSpec node, const Connect& connect, std::shared_ptr<const Clock> clock,
                         std::shared_ptr<void> keep_alive)
    : config_(std::move(config)),
      node_(std::move(node)),
      keys_(config_.run_id),
      keep_alive_(std::move(keep_alive)),
      connect_(connect),
      clock_(clock ? std::move(clock) : std::make_shared<SteadyClock>()),
      log_(log::get("rdzv")),
      store_(connect()),
      hb_store_(connect()),
      liveness_(*hb_store_, LivenessConfig{config_.run_id, config_.settings.keep_alive_interval,
                                           config_.settings.keep_alive_max_attempt}) {
  if (config_.min_nodes < 1 || config_.min_nodes > config_.max_nodes)
    throw RendezvousError(fmt::format("c10d rendezvous needs 0 < min_nodes <= max_nodes (got {}:{})", config_.min_nodes,
                                      config_.max_nodes));
  // A heartbeat that cannot reach the store within its interval is missed anyway. Reconnecting for read_timeout
  // instead would hold stop_heartbeats(), and so the end of the job, that long per try once the store is gone (its
  // host agent exited after the exit barrier).
  if (auto* tcp = dynamic_cast<store::TcpStore*>(hb_store_.get()))
    tcp->set_connect_timeout(std::max<store::Duration>(config_.settings.keep_alive_interval, std::chrono::seconds(1)));
  // Opened now, while the store is known to answer: opened later, a store already gone would hold the handler's
  // end for read_timeout. Its reconnects are short for the same reason.
  loss_store_ = connect();
  if (auto* tcp = dynamic_cast<store::TcpStore*>(loss_store_.get())) tcp->set_connect_timeout(std::chrono::seconds(1));
  heartbeat_thread_ = std::thread([this] { heartbeat_loop(); });
  loss_thread_ = std::thread([this] { config_.presence ? presence_loop() : loss_loop(); });
}

C10dHandler::~C10dHandler() {
  stop_heartbeats();
  {
    std::lock_guard lock(mutex_);
    loss_stopping_ = true;
  }
  wake_.notify_all();
  if (loss_thread_.joinable()) loss_thread_.join();
  release_presence();  // not left nor shut down: gone, and the others may as well know it at once
}

void C10dHandler::set_worker_store_address(const std::string& host, std::uint16_t port) {
  worker_store_host_ = host;
  worker_store_port_ = port;
}

RoundInfo C10dHandler::next_rendezvous() {
  if (worker_store_port_ == 0)
    throw RendezvousError(
        "c10d rendezvous: the agent must call set_worker_store_address() with its worker store's "
        "port before next_rendezvous()");
  NodeRecord me{node_.addr, ::getpid(), node_.local_world_size, node_.role, worker_store_host_, worker_store_port_};
  JoinOp op(*store_, join_config(config_), me, current_);
  JoinResult result;
  try {
    for (;;) {
      // Until the step has returned, this node may have arrived without joining_ saying where.
      auto step = [&] {
        {
          std::lock_guard lock(mutex_);
          // Left (a death signal): no new arrival may follow the withdrawal.
          if (abandoned_) throw RendezvousError("rendezvous '" + config_.run_id + "': this node left the rendezvous");
          stepping_ = true;
        }
        auto settle = [&] {
          {
            std::lock_guard lock(mutex_);
            stepping_ = false;
            if (op.arrival() > 0) joining_.emplace(op.round(), op.arrival());
          }
          step_done_.notify_all();
        };
        try {
          auto s = op.step(clock_->now());
          settle();
          return s;
        } catch (...) {
          settle();
          throw;
        }
      }();
      if (auto* r = std::get_if<JoinResult>(&step)) {
        result = std::move(*r);
        break;
      }
      const auto& wait = std::get<JoinWait>(step);
      const auto now = clock_->now();
      if (wait.until <= now) continue;
      auto left =
          wait.until == TimePoint::max() ? config_.wait_slice : std::chrono::ceil<store::Duration>(wait.until - now);
      try {
        store_->wait({wait.key}, std::min(left, config_.wait_slice));
      } catch (const store::TimeoutError&) {
        // the deadline or slice passed: step() decides what that means
      }
    }
  } catch (const store::StoreError& e) {
    {
      std::lock_guard lock(mutex_);
      joining_.reset();
    }
    throw RendezvousConnectionError(
        fmt::format("rendezvous '{}': the rendezvous store failed: {}. Check that the --rdzv-endpoint host is up.",
                    config_.run_id, e.what()));
  }
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
  }
  wake_.notify_all();
  log_->info("rendezvous '{}' round {} complete: group rank {} of {}, world size {}, master {}:{}", config_.run_id,
             result.round, a.group_rank, a.group_world_size, a.global_world_size, a.master_addr, a.master_port);
  return round_info(a, result.round, std::make_shared<store::PrefixStore>(keys_.round(result.round) + "agent", store_));
}

std::string C10dHandler::over_value() {
  if (!current_ || !over_cache_.empty()) return over_cache_;
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
  store_->compare_set(keys_.closed(), "", fmt::format("closed by {} (pid {})", node_.addr, ::getpid()));
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
  if (store_->add(keys_.released(current_->round), 1) >= current_->members)
    store_->set(keys_.released_all(current_->round), "1");
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

// As leave(), but the heartbeat thread and the loss watch stay for the rounds to come: only this round's beats and
// ON_CLOSE registration go (its later connection close must not read as a death of a round it left).
void C10dHandler::step_out(const std::string& why) {
  if (!current_) return;
  {
    std::lock_guard lock(mutex_);
    liveness_.stop();
    held_.reset();
  }
  wake_.notify_all();
  try {
    mark_exit(*store_, keys_, current_->round, current_->rank, current_->members, "left", kOverSteppedOut, why);
  } catch (const store::StoreError& e) {
    log_->warn("could not step out of rendezvous '{}': {}", config_.run_id, e.what());
  }
  release_presence();  // after the exit is recorded: a departure; the next round it joins takes a new lease
  current_.reset();
}

// From another thread, while the agent thread may be blocked in a WAIT of next_rendezvous() or exit_barrier().
void C10dHandler::abandon() {
  std::optional<Membership> held;
  std::optional<std::pair<std::uint64_t, std::int64_t>> joining;
  {
    // A step in flight may be adding this node's arrival: wait for it (a few store round trips; bounded, as the
    // agent gives leaving 0.5 s in all) so the arrival is withdrawn rather than left for others to wait on.
    std::unique_lock lock(mutex_);
    step_done_.wait_for(lock, std::chrono::milliseconds(300), [&] { return !stepping_; });
    abandoned_ = true;
    held = held_;
    joining = joining_;
  }
  if (!held && !joining) return;
  const auto why = fmt::format("node {} (pid {}) left (its agent was stopped)", node_.addr, ::getpid());
  try {
    auto store = connect_();
    if (joining) {
      withdraw(*store, joining->first, joining->second, why);
    } else {
      mark_exit(*store, keys_, held->round, held->rank, held->members, "left", kOverLeave, why);
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

void C10dHandler::stop_heartbeats() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
    liveness_.stop();
  }
  wake_.notify_all();
  if (heartbeat_thread_.joinable()) heartbeat_thread_.join();
}

// Not stopped by stop_heartbeats(): leave() must return within its budget, and a WAIT slice may be under way. It
// acts only on a round it still follows, and ends with the handler.
void C10dHandler::loss_loop() {
  constexpr auto kSlice = std::chrono::milliseconds(500);
  std::optional<std::uint64_t> settled;  // the round whose `lost` key was handled: the heartbeat has it from there
  std::unique_lock lock(mutex_);
  while (!loss_stopping_) {
    if (stopping_ || !held_ || settled == held_->round || !liveness_.reports_closes()) {
      wake_.wait_for(lock, std::chrono::milliseconds(200));
      continue;
    }
    const auto round = *held_;
    lock.unlock();
    auto outcome = LossWatch::Outcome::kNothing;
    try {
      LossWatch watch(*loss_store_, config_.run_id);
      outcome = watch.watch(round, kSlice, kReconnectGrace, [this] {
        std::lock_guard l(mutex_);
        return loss_stopping_ || stopping_;
      });
    } catch (const std::exception& e) {
      log_->debug("rendezvous '{}': waiting for closed connections failed: {}", config_.run_id, e.what());
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
    if (outcome == LossWatch::Outcome::kDeclared)
      log_->warn("rendezvous '{}' round {} is over: a member's agent is gone (its store connection closed)",
                 config_.run_id, round.round);
    if (outcome == LossWatch::Outcome::kBlip)
      log_->info("rendezvous '{}' round {}: a member's store connection closed and came back; not a death",
                 config_.run_id, round.round);
    lock.lock();
    if (outcome != LossWatch::Outcome::kNothing) settled = round.round;
  }
}

void C10dHandler::release_presence() {
  if (config_.presence) config_.presence->release();
}

// The loss thread where the store has presence keys (etcd): binds this member's key of each round it joins, then
// polls the keys of the members it watches every kPoll, on the loss thread's own connection, so neither the agent's
// calls nor the heartbeats wait on it.
void C10dHandler::presence_loop() {
  constexpr auto kPoll = std::chrono::milliseconds(250);
  PresenceWatch watch(*loss_store_, config_.run_id, config_.presence->ttl());
  std::optional<std::uint64_t> attached;  // the round whose key this member holds
  std::unique_lock lock(mutex_);
  while (!loss_stopping_) {
    if (stopping_ || !held_) {
      wake_.wait_for(lock, std::chrono::milliseconds(200));
      continue;
    }
    const auto round = *held_;
    lock.unlock();
    try {
      if (attached != round.round) {
        config_.presence->attach(keys_.alive(round.round, round.rank),
                                 fmt::format("{} (pid {})", node_.addr, ::getpid()));
        attached = round.round;
      }
      for (int rank : watch.poll(round))
        log_->warn("rendezvous '{}' round {} is over: group rank {}'s agent is gone (its etcd lease expired)",
                   config_.run_id, round.round, rank);
    } catch (const std::exception& e) {
      log_->debug("rendezvous '{}': watching the members' etcd leases failed: {}", config_.run_id, e.what());
    }
    lock.lock();
    wake_.wait_for(lock, kPoll, [this] { return loss_stopping_; });
  }
}

void C10dHandler::heartbeat_loop() {
  std::unique_lock lock(mutex_);
  while (!stopping_) {
    auto next = TimePoint::max();
    try {
      next = liveness_.tick(clock_->now());
    } catch (const std::exception& e) {  // a store hiccup: keep beating, as torchrun (warnings only)
      log_->warn("rendezvous '{}' heartbeat failed: {}", config_.run_id, e.what());
      next = clock_->now() + config_.settings.keep_alive_interval / 4;
    }
    auto wait = next == TimePoint::max() ? std::chrono::milliseconds(1000)
                                         : std::chrono::ceil<std::chrono::milliseconds>(next - clock_->now());
    wake_.wait_for(lock, std::clamp(wait, std::chrono::milliseconds(1), std::chrono::milliseconds(1000)));
  }
}

}  // namespace ctrun::rdzv
