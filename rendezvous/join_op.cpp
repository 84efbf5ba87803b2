#include "rendezvous/join_op.hpp"

#include <algorithm>

#include <fmt/format.h>

#include "common/text.hpp"
#include "rendezvous/handler.hpp"
#include "rendezvous/loss_watch.hpp"
#include "rendezvous/membership.hpp"
#include "rendezvous/peek.hpp"
#include "store/store_util.hpp"

namespace ctrun::rdzv {
namespace {

// After our deadline another node may already have decided the round: give its completion this long to land.
constexpr auto kDecisionGrace = std::chrono::seconds(5);
constexpr std::int64_t kMaxNamesInErrors = 16;

double seconds(store::Duration d) { return std::chrono::duration<double>(d).count(); }

}  // namespace

JoinOp::JoinOp(store::Store& store, JoinConfig config, NodeRecord me, std::optional<Membership> previous)
    : store_(store), config_(std::move(config)), keys_(config_.run_id), me_(std::move(me)), previous_(previous) {}

// The keys the step about to run reads first (guesses are fine: an unused one costs a request in the same round
// trip, a missing one a round trip of its own).
std::vector<std::string> JoinOp::first_reads() const {
  switch (phase_) {
    case Phase::kStart:
      // A member leaving its round reads whether the round exists (done never changes once set) before it marks it
      // over: the gate needs nothing else of it but whether it drained.
      if (previous_) return {keys_.latest(), keys_.done(previous_->round)};
      return {keys_.latest()};
    case Phase::kGate:
      if (round_ == 0) return {};
      if (member_of(round_ - 1)) {
        if (woken_ == keys_.drained(round_ - 1)) return {};
        if (drain_waited_) return {keys_.drained(round_ - 1), keys_.lost(round_ - 1)};
        return {keys_.drained(round_ - 1)};
      }
      return {keys_.done(round_ - 1), keys_.drained(round_ - 1), keys_.over(round_ - 1)};
    case Phase::kCount:
      if (config_.min_nodes == config_.max_nodes && arrival_ < config_.max_nodes && !counted_) return {};
      return {keys_.done(round_), keys_.assign(round_, arrival_)};
    case Phase::kDecided:
      return {keys_.done(round_), keys_.assign(round_, arrival_)};
    case Phase::kArrive:
      return {};
  }
  return {};
}

std::variant<JoinResult, JoinWait> JoinOp::step(TimePoint now) {
  // Whether the run was closed, and what the step reads first, in one round trip (Store::peek).
  // A step woken by the key it waited for made progress: whether the run closed is asked by every other step (a
  // wait slice's among them), not by this one, so that a herd woken by one key sends one request per node, not two.
  auto keys = first_reads();
  const bool ask_closed = woken_.empty();
  if (ask_closed) keys.insert(keys.begin(), keys_.closed());
  prefetched_.clear();
  if (!keys.empty()) {
    auto values = store_.peek(keys, kAbsentSentinel);
    if (ask_closed && values[0])
      throw RendezvousClosedError(
          fmt::format("rendezvous '{}' is closed ({}): the job that used this --rdzv-id has "
                      "ended; start a new job with a new --rdzv-id",
                      config_.run_id, *values[0]));
    for (std::size_t i = ask_closed ? 1 : 0; i < keys.size(); ++i) prefetched_.emplace(keys[i], std::move(values[i]));
  }
  struct ForgetWoken {
    std::string& key;
    ~ForgetWoken() { key.clear(); }
  } forget{woken_};
  for (;;) {
    Step s;
    switch (phase_) {
      case Phase::kStart:
        s = start(now);
        break;
      case Phase::kArrive:
        s = arrive();
        break;
      case Phase::kGate:
        s = gate(now);
        break;
      case Phase::kCount:
        s = count(now);
        break;
      case Phase::kDecided:
        s = decided(now);
        break;
    }
    if (s) return std::move(*s);
  }
}

// A read of a key that may be missing: what the step's first round trip fetched (each prefetched value serves one
// read: a later read in the same step sees what changed since), else one round trip (peek.hpp).
std::optional<std::string> JoinOp::read(const std::string& key) {
  if (auto it = prefetched_.find(key); it != prefetched_.end()) {
    auto v = std::move(it->second);
    prefetched_.erase(it);
    return v;
  }
  return peek(store_, key);
}

bool JoinOp::exists(const std::string& key) {
  if (key == woken_) return true;
  if (auto it = prefetched_.find(key); it != prefetched_.end()) {
    const bool present = it->second.has_value();
    prefetched_.erase(it);
    return present;
  }
  return store_.check({key});
}

// One round trip for a key known to exist; a store that has not got it yet is waited for (get).
std::int64_t JoinOp::read_int(const std::string& key) {
  auto v = read(key);
  return store::parse_add_operand(key, v ? *v : store_.get(key));
}

std::optional<std::int64_t> JoinOp::peek_int(const std::string& key) {
  auto v = read(key);
  if (!v) return std::nullopt;
  return store::parse_add_operand(key, *v);
}

JoinOp::Step JoinOp::start(TimePoint now) {
  started_ = now;
  deadline_ = now + config_.join_timeout;
  if (auto latest = peek_int(keys_.latest())) round_ = static_cast<std::uint64_t>(*latest);
  if (previous_) {
    // Leaving our round tells its other members to restart (torchrun: the node lands in the wait list).
    mark_exit(store_, keys_, previous_->round, previous_->rank, previous_->members, "left", kOverRejoin,
              fmt::format("node {} re-rendezvous (its workers stopped)", me_.describe()), previous_->over_known);
    round_ = std::max(round_, previous_->round + 1);
  }
  phase_ = Phase::kArrive;
  return std::nullopt;
}

JoinOp::Step JoinOp::arrive() {
  arrival_ = store_.add(keys_.joined(round_), 1);
  me_.arrival = arrival_;
  done_.reset();
  counted_ = false;
  store_.set(keys_.node(round_, arrival_), me_.encode());
  if (arrival_ == config_.min_nodes) store_.set(keys_.min_reached(round_), "1");
  last_call_.reset();
  phase_ = Phase::kGate;
  return std::nullopt;
}

// A round may complete only once every member of the previous round left it or died: the survivors of a broken
// round, the waiters and the spares all meet in the next round.
JoinOp::Step JoinOp::gate(TimePoint now) {
  if (round_ == 0) {
    phase_ = Phase::kCount;
    return std::nullopt;
  }
  const auto prev = round_ - 1;
  if (member_of(prev)) return drain(prev, now);
  auto pass = [&]() -> Step {
    if (spare_) deadline_ = now + config_.join_timeout;  // leaving the spare list restarts the clock (torchrun)
    spare_ = false;
    phase_ = Phase::kCount;
    return std::nullopt;
  };
  const auto done_prev = peek_int(keys_.done(prev));
  // We were a member of the previous round, yet the store does not know it: the store restarted empty and every
  // round before this one is gone with it. Nobody can still run in it (all lost it with the store): meet here.
  if (!done_prev && previous_ && previous_->round == prev) return pass();
  if (!done_prev) {  // we came beyond MAX of a round still collecting
    spare_ = true;
    return JoinWait{keys_.done(prev), TimePoint::max()};
  }
  const auto members = *done_prev;
  if (members == 0 || exists(keys_.drained(prev))) return pass();
  if (!exists(keys_.over(prev))) {  // a full round runs healthily: wait as a spare
    spare_ = true;
    return JoinWait{keys_.over(prev), TimePoint::max()};
  }
  if (spare_) {
    deadline_ = now + config_.join_timeout;
    spare_ = false;
  }
  if (now >= deadline_) throw_gate_timeout(now, members);
  return JoinWait{keys_.drained(prev), deadline_};
}

// A member that left round `prev` (start() marked it over) waits for its other members to leave it or be declared
// dead: done(prev) was read before that (kStart), drained(prev) is waited for directly (a WAIT on a key that is
// there answers at once), and its wake-up is taken for the key's presence: one request per member until the round
// drained, none after. A member lost while the others leave (after the loss watch's one wake-up) is declared from the
// `lost` log at the next look, by its settlers only (loss_watch.hpp).
JoinOp::Step JoinOp::drain(std::uint64_t prev, TimePoint now) {
  if (!prev_members_) prev_members_ = peek_int(keys_.done(prev)).value_or(-1);  // read with kStart's reads
  auto pass = [&]() -> Step {
    drain_waited_ = false;
    phase_ = Phase::kCount;
    return std::nullopt;
  };
  // The store does not know the round we were a member of: it restarted empty, and every round before this one is
  // gone with it. Nobody can still run in it (all lost it with the store): meet here.
  if (*prev_members_ <= 0 || woken_ == keys_.drained(prev)) return pass();
  // MIN == MAX and below MAX: only the MAX-th arrival can complete the round, and it passes this gate first. The
  // others wait for the round itself at once (count()), not for the drain and then for the round: one herd of N
  // wake-ups fewer when a whole round rejoins.
  if (config_.min_nodes == config_.max_nodes && arrival_ < config_.max_nodes) return pass();
  if (drain_waited_) {  // a wait slice passed and the round has not drained
    if (exists(keys_.drained(prev))) return pass();
    if (settle_lost(prev) && exists(keys_.drained(prev))) return pass();
  }
  if (now >= deadline_) throw_gate_timeout(now, *prev_members_);
  drain_waited_ = true;
  return JoinWait{keys_.drained(prev), deadline_};
}

bool JoinOp::settle_lost(std::uint64_t prev) {
  auto log = read(keys_.lost(prev));
  if (!log) return false;  // nobody's connection closed (or the store has no ON_CLOSE)
  return LossWatch(store_, config_.run_id).settle_log(*previous_, *log) == LossWatch::Outcome::kDeclared;
}

JoinOp::Step JoinOp::count(TimePoint now) {
  // MIN == MAX: the MAX-th arrival completes the round as soon as it arrives, so a node that arrived below MAX has
  // nothing to read or decide yet: it waits for the round (a WAIT on a key already there answers at once). When a
  // wait slice passes with no round, it reads `joined` below and completes the round itself if MAX nodes are there
  // (the MAX-th arrival stopped before deciding).
  if (config_.min_nodes == config_.max_nodes && arrival_ < config_.max_nodes && !counted_ && now < deadline_) {
    counted_ = true;
    return JoinWait{keys_.done(round_), deadline_};
  }
  if ((done_ = peek_int(keys_.done(round_)))) {
    phase_ = Phase::kDecided;
    return std::nullopt;
  }
  if (arrival_ > config_.max_nodes) {
    // The round completes without us; once it does, decided() tells whether we are a spare (it is full) or a
    // waiter (a last call closed it below MAX just before MAX arrivals came): only a waiter makes it restart.
    spare_ = true;
    return JoinWait{keys_.done(round_), TimePoint::max()};
  }
  // Our own ADD said how many had arrived with us: the MAX-th arrival needs no read to know the round is full.
  const auto joined = arrival_ >= config_.max_nodes ? arrival_ : read_int(keys_.joined(round_));
  if (joined >= config_.max_nodes) return try_decide(config_.max_nodes);
  if (joined >= config_.min_nodes) {
    if (!last_call_) last_call_ = now + config_.last_call_timeout;
    if (now >= *last_call_) return try_decide(joined);
    if (now >= deadline_) return on_join_deadline(now);
    return JoinWait{keys_.done(round_), std::min(*last_call_, deadline_)};
  }
  if (now >= deadline_) return on_join_deadline(now);
  // MIN < MAX: wake at MIN to start the last call. MIN == MAX has no last call: the MAX-th arrival decides at once
  // (above), so the others wait for the round itself. Waking them at MIN would only send all N to contend for
  // `decided` and then wait again: two herds of N instead of one.
  return JoinWait{config_.min_nodes < config_.max_nodes ? keys_.min_reached(round_) : keys_.done(round_), deadline_};
}

JoinOp::Step JoinOp::try_decide(std::int64_t members) {
  const auto token = std::to_string(arrival_);  // arrival indices are unique within a round
  if (store_.compare_set(keys_.decided(round_), "", token) == token) {
    complete(members);
    done_ = members;
  }
  phase_ = Phase::kDecided;
  return std::nullopt;
}

// The decider turns the arrivals 1..N into ranks: O(N) reads and writes by one node, O(1) per other node.
void JoinOp::complete(std::int64_t members) {
  std::vector<std::string> node_keys;
  for (std::int64_t k = 1; k <= members; ++k) node_keys.push_back(keys_.node(round_, k));
  auto values = store_.multi_get(node_keys);  // waits for arrivals still writing their record
  std::vector<NodeRecord> nodes;
  nodes.reserve(values.size());
  for (const auto& v : values) nodes.push_back(NodeRecord::decode(v));
  std::vector<int> order;
  auto assignments = assign_ranks(nodes, &order);
  std::vector<std::string> keys, vals;
  keys.reserve(3 * nodes.size());
  vals.reserve(3 * nodes.size());
  for (std::size_t i = 0; i < nodes.size(); ++i) {
    keys.push_back(keys_.assign(round_, nodes[i].arrival));
    vals.push_back(assignments[i].encode());
  }
  for (std::size_t rank = 0; rank < order.size(); ++rank) {
    keys.push_back(keys_.member(round_, static_cast<int>(rank)));
    vals.push_back(nodes[order[rank]].encode());
    keys.push_back(keys_.heartbeat(round_, static_cast<int>(rank)));
    vals.emplace_back(Keys::kUnbeaten);
  }
  store_.multi_set(keys, vals);
  store_.set(keys_.done(round_), std::to_string(members));  // last: every waiter wakes to a complete round
  store_.set(keys_.latest(), std::to_string(round_));
}

JoinOp::Step JoinOp::decided(TimePoint now) {
  if (!done_) done_ = peek_int(keys_.done(round_));
  if (!done_) {  // decided by another node that is still writing the round
    const auto until = deadline_passed_ ? deadline_ + kDecisionGrace : deadline();
    if (now >= until)
      throw RendezvousTimeoutError(
          fmt::format("rendezvous '{}' round {}: the node completing the round stopped before publishing it; retry",
                      config_.run_id, round_));
    return JoinWait{keys_.done(round_), until};
  }
  const auto members = *done_;
  if (arrival_ <= members) {
    // The decider wrote assign/* before done: present (a GET would wait for it anyway).
    const auto key = keys_.assign(round_, arrival_);
    auto value = read(key);
    auto a = Assignment::decode(value ? *value : store_.get(key));
    return JoinResult{round_, arrival_, std::move(a)};
  }
  if (deadline_passed_) throw RendezvousTimeoutError(timeout_message_);
  if (members == 0 && now >= deadline()) {  // aborted by a node that timed out with us: its message says why
    auto over = store_.get(keys_.over(round_));
    throw RendezvousTimeoutError(over.substr(std::min(over.size(), over.find(": ") + 2)));
  }
  if (members > 0 && members < config_.max_nodes)  // a membership change: the round's members must restart
    mark_over(store_, keys_, round_, kOverJoin, fmt::format("node {} is waiting to join", me_.describe()));
  spare_ = members >= config_.max_nodes;
  round_ += 1;
  phase_ = Phase::kArrive;
  return std::nullopt;
}

JoinOp::Step JoinOp::on_join_deadline(TimePoint now) {
  // A member that went past the drain (drain(): MIN == MAX, below MAX) while its old round never drained: nobody
  // could complete this round (its decider waits for the drain), and what holds it is the old round's members.
  if (round_ > 0 && member_of(round_ - 1) && prev_members_.value_or(0) > 0 && !exists(keys_.drained(round_ - 1)))
    throw_gate_timeout(now, *prev_members_);
  const auto joined = peek_int(keys_.joined(round_)).value_or(0);
  std::vector<std::string> described;
  for (std::int64_t k = 1; k <= std::min(joined, kMaxNamesInErrors); ++k) {
    if (auto record = peek(store_, keys_.node(round_, k))) described.push_back(NodeRecord::decode(*record).describe());
  }
  if (joined > kMaxNamesInErrors) described.push_back("...");
  const std::string names = text::join(described, ", ");
  timeout_message_ = fmt::format(
      "rendezvous '{}' timed out after {:.1f} s in round {}: {} of min {} (max {}) node(s) joined [{}]; {} more "
      "needed. Check that every node uses the same --rdzv-endpoint and --rdzv-id, or raise join_timeout in "
      "--rdzv-conf.",
      config_.run_id, seconds(std::chrono::duration_cast<store::Duration>(now - started_)), round_, joined,
      config_.min_nodes, config_.max_nodes, names, std::max<std::int64_t>(0, config_.min_nodes - joined));
  // Abort the round so that nobody completes it later with us in it; if another node decided it first (completed
  // or aborted), we may still be in it: read its decision.
  const auto token = "abort " + std::to_string(arrival_);
  if (store_.compare_set(keys_.decided(round_), "", token) != token) {
    deadline_passed_ = true;
    phase_ = Phase::kDecided;
    return std::nullopt;
  }
  abort_round(timeout_message_);
  throw RendezvousTimeoutError(timeout_message_);
}

void JoinOp::abort_round(const std::string& message) {
  store_.set(keys_.done(round_), "0");
  mark_over(store_, keys_, round_, kOverAborted, message);
  store_.set(keys_.drained(round_), "1");
}

void JoinOp::throw_gate_timeout(TimePoint now, std::int64_t members) {
  const auto prev = round_ - 1;
  std::vector<std::string> described;
  int running = 0;
  for (int rank = 0; rank < members; ++rank) {
    if (store_.check({keys_.exit(prev, rank)})) continue;
    if (++running <= kMaxNamesInErrors)
      described.push_back(fmt::format("rank {}: ", rank) +
                          NodeRecord::decode(store_.get(keys_.member(prev, rank))).describe());
  }
  const std::string names = text::join(described, ", ");
  auto message = fmt::format(
      "rendezvous '{}' timed out after {:.1f} s waiting for round {} to end: {} of its {} node(s) neither "
      "re-joined nor stopped heartbeating [{}]. Their agents may be hung.",
      config_.run_id, seconds(std::chrono::duration_cast<store::Duration>(now - started_)), prev, running, members,
      names);
  const auto token = "abort " + std::to_string(arrival_);
  if (store_.compare_set(keys_.decided(round_), "", token) == token) abort_round(message);
  throw RendezvousTimeoutError(message);
}

}  // namespace ctrun::rdzv
