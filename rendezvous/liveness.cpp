#include "rendezvous/liveness.hpp"

#include <algorithm>

#include <fmt/format.h>

#include "rendezvous/loss_watch.hpp"
#include "rendezvous/membership.hpp"
#include "rendezvous/peek.hpp"
#include "rendezvous/records.hpp"

namespace ctrun::rdzv {

Liveness::Liveness(store::Store& store, LivenessConfig config)
    : store_(store), config_(std::move(config)), keys_(config_.run_id) {}

void Liveness::follow(const Membership& membership, TimePoint now) {
  membership_ = membership;
  watch_ = 0;
  seen_.clear();
  exited_.clear();
  beating_.clear();
  timing_heartbeats_ = false;
  round_over_ = false;
  next_beat_ = now;
  next_check_ = now + config_.interval / 4;
  beats_ = 0;
}

void Liveness::stop() {
  membership_.reset();
  if (!registered_) return;
  // A member that stops (done, leaving) must not look like one that died when its process exits or goes quiet.
  try {
    if (server_times_silence_) store_.cancel_on_silence(keys_.lost(*registered_));
    store_.cancel_on_close(keys_.lost(*registered_));
  } catch (const store::StoreError&) {
    // the store is gone: nobody is left to notice
  }
  registered_.reset();
}

store::Duration Liveness::silence_limit() const {
  return config_.interval * config_.max_attempts - config_.interval / 2;
}

void Liveness::register_on_close() {
  const auto round = membership_->round;
  if (no_on_close_ || registered_ == round) return;
  if (registered_) {
    if (server_times_silence_) store_.cancel_on_silence(keys_.lost(*registered_));
    store_.cancel_on_close(keys_.lost(*registered_));
  }
  registered_.reset();
  const auto rank = membership_->rank;
  if (!store_.append_on_close(keys_.lost(round), on_close_entry(rank), on_reconnect_entry(rank))) {
    no_on_close_ = true;
    return;
  }
  // The server times this member's silence too: nobody has to read its counter (check() reads nothing).
  server_times_silence_ =
      store_.append_on_silence(keys_.lost(round), on_silence_entry(rank), on_reconnect_entry(rank), silence_limit());
  registered_ = round;
}

TimePoint Liveness::tick(TimePoint now) {
  if (!membership_) return TimePoint::max();
  register_on_close();
  if (now >= next_beat_) {
    // A SET of the beat's number, not an ADD: it has no reply, so it rides in the same write as the check's reads
    // (MuxStore) and costs the store no round trip of its own. Watchers look for a change of value either way.
    store_.set(keys_.heartbeat(membership_->round, membership_->rank), std::to_string(++beats_));
    next_beat_ = now + beat_gap();
  }
  if (now >= next_check_) {
    check(now);
    next_check_ = now + std::max<store::Duration>(config_.interval / 4, std::chrono::milliseconds(1));
  }
  return std::min(next_beat_, next_check_);
}

store::Duration Liveness::beat_gap() const {
  const auto interval = config_.interval;
  if (!config_.align_beats || interval < std::chrono::milliseconds(100)) return interval;
  // The next point of the grid, shifted by up to 49 ms by rank: a burst the store reads in a few wake-ups, yet not
  // all in the same millisecond.
  const auto wall = std::chrono::duration_cast<store::Duration>(std::chrono::system_clock::now().time_since_epoch());
  const auto shift = std::chrono::duration_cast<store::Duration>(std::chrono::milliseconds(membership_->rank % 50));
  auto gap = interval - (wall - shift) % interval;
  if (gap < interval / 2) gap += interval;
  return gap;
}

void Liveness::time_heartbeats(std::uint64_t round) {
  if (!membership_ || membership_->round != round || timing_heartbeats_) return;
  timing_heartbeats_ = true;
  seen_.clear();  // every watched counter is timed from its first reading on
}

void Liveness::round_over(std::uint64_t round) {
  if (membership_ && membership_->round == round) round_over_ = true;
}

bool Liveness::stale(int rank, const std::string& value, TimePoint now) {
  auto [it, inserted] = seen_.try_emplace(rank, Seen{value, now});
  if (!inserted && it->second.value != value) it->second = Seen{value, now};
  const auto limit = config_.interval * config_.max_attempts - config_.interval / 2;
  return now - it->second.changed > limit;
}

void Liveness::check(TimePoint now) {
  // Where the server times every member's silence (ON_SILENCE, loss_watch.hpp), the loss watch hears of a hung
  // member as of a dead one, once that member has registered: its first beat says it has (it registers first, on the
  // same connection). Until then its counter is timed here: a member killed between the round's completion and its
  // first tick closes no registered connection.
  const bool server_times =
      server_times_silence_ && registered_ == membership_->round && (!timing_heartbeats_ || round_over_);
  const auto& m = *membership_;
  std::vector<int> ranks;
  std::vector<std::string> keys;
  if (watch_ < m.rank) {
    // Watch the monitor and the next ranks after it: if several low ranks die together, their silences are timed
    // in parallel, not one after the other.
    for (int r = watch_; r < m.rank && static_cast<int>(ranks.size()) < kWatchWindow; ++r)
      if (exited_.count(r) == 0) ranks.push_back(r);
  } else {
    for (int r = m.rank + 1; r < m.members; ++r)
      if (exited_.count(r) == 0) ranks.push_back(r);
  }
  // The window first, then the ranks in it the server times already.
  if (server_times) std::erase_if(ranks, [this](int r) { return beating_.count(r) != 0; });
  for (int r : ranks) keys.push_back(keys_.heartbeat(m.round, r));
  if (keys.empty()) return;
  // The counters exist from the round's completion on, unless the store restarted empty: then a MULTI_GET would wait
  // for them for the store's whole timeout, on the handler's lock, which the join of the next round needs. A counter
  // the store lost is no silence to time (the round went with the store): skip. A member watching a few counters
  // peeks at them (one round trip, in the same write as its beat); the monitor watching N - 1 reads them in bulk.
  std::vector<std::string> values;
  if (keys.size() <= static_cast<std::size_t>(kWatchWindow)) {
    for (auto& v : store_.peek(keys, kAbsentSentinel)) {
      if (!v) return;
      values.push_back(std::move(*v));
    }
  } else {
    if (!store_.check(keys)) return;
    values = store_.multi_get(keys);
  }
  for (std::size_t i = 0; i < ranks.size(); ++i) {
    if (values[i] != Keys::kUnbeaten) beating_.insert(ranks[i]);
    if (stale(ranks[i], values[i], now)) declare_gone(ranks[i], now);
  }
  while (watch_ < m.rank && exited_.count(watch_) != 0) ++watch_;  // the next rank up is the monitor now (maybe us)
}

void Liveness::declare_gone(int rank, TimePoint now) {
  const auto& m = *membership_;
  exited_.insert(rank);
  if (store_.check({keys_.exit(m.round, rank)})) return;  // it left the round (and stopped beating after that)
  const auto& seen = seen_.at(rank);
  // A peek, not a get, for the same reason as the check above: a restarted store has no member records.
  const auto record = peek(store_, keys_.member(m.round, rank));
  auto who = record ? NodeRecord::decode(*record).describe() : std::string("of this round");
  auto silent = std::chrono::duration<double>(now - seen.changed).count();
  mark_exit(store_, keys_, m.round, rank, m.members, "dead", kOverDead,
            fmt::format("node {} (group rank {}) lost heartbeat: none for {:.1f} s", who, rank, silent));
}

}  // namespace ctrun::rdzv
