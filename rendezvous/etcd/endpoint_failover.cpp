#include "rendezvous/etcd/endpoint_failover.hpp"

#include <algorithm>
#include <random>
#include <thread>

#include <fmt/format.h>

#include "common/log.hpp"

namespace ctrun::rdzv::etcd {
namespace {

constexpr std::chrono::milliseconds kFirstBackoff(50), kMaxBackoff(1000);

const Clock& steady_clock() {
  static const SteadyClock clock;
  return clock;
}

}  // namespace

EndpointFailover::EndpointFailover(const Options& options)
    : EndpointFailover(options, options.endpoints.empty() ? 0 : std::random_device{}() % options.endpoints.size(),
                       steady_clock(), nullptr) {}

EndpointFailover::EndpointFailover(const Options& options, std::size_t first, const Clock& clock, Sleep sleep)
    : endpoints_(options.endpoints),
      give_up_after_(options.request_timeout),
      attempt_timeout_(options.attempt_timeout),
      clock_(clock),
      sleep_(std::move(sleep)),
      current_(first) {
  if (endpoints_.empty()) throw store::StoreError("etcd client needs at least one endpoint (--rdzv-endpoint)");
  if (first >= endpoints_.size()) throw std::out_of_range("EndpointFailover: first endpoint out of range");
}

std::string EndpointFailover::endpoints() const {
  std::string out;
  for (const auto& ep : endpoints_) {
    if (!out.empty()) out += ',';
    out += ep.to_string();
  }
  return out;
}

void EndpointFailover::abandon() {
  {
    std::lock_guard lock(abandon_mutex_);
    abandoned_ = true;
  }
  abandoned_cv_.notify_all();
}

void EndpointFailover::throw_if_abandoned(const std::string& what) const {
  if (abandoned_)
    throw store::StoreError(fmt::format("etcd {}: not retried, the client is closing (its owner is going away)", what));
}

void EndpointFailover::pause(std::chrono::steady_clock::duration d) {
  if (sleep_) return sleep_(d);
  std::unique_lock lock(abandon_mutex_);
  abandoned_cv_.wait_for(lock, d, [this] { return abandoned_.load(); });
}

void EndpointFailover::outage_seen(TimePoint at) {
  auto none = kNoOutage;
  outage_since_.compare_exchange_strong(none, at.time_since_epoch().count());
}

void EndpointFailover::outage_ended() { outage_since_.store(kNoOutage); }

std::optional<TimePoint> EndpointFailover::outage_since() const {
  const auto since = outage_since_.load();
  if (since == kNoOutage) return std::nullopt;
  return TimePoint(TimePoint::duration(since));
}

// Unless another request already moved on from that member.
void EndpointFailover::move_on_from(std::size_t index) {
  current_.compare_exchange_strong(index, (index + 1) % endpoints_.size());
}

EndpointFailover::Tries::Tries(EndpointFailover& failover, std::string what, TimePoint until)
    : failover_(failover),
      what_(std::move(what)),
      until_(until),
      failing_since_(failover.clock_.now()),
      backoff_(kFirstBackoff) {
  if (const auto outage = failover.outage_since(); outage && *outage < *failing_since_) {
    failing_since_ = outage;
    inherited_outage_ = true;
  }
}

TimePoint EndpointFailover::Tries::give_up_at() const {
  return failing_since_ ? *failing_since_ + failover_.give_up_after_ : TimePoint::max();
}

void EndpointFailover::Tries::answered() {
  failover_.outage_ended();
  inherited_outage_ = false;
  failing_since_.reset();
  failures_ = 0;
  backoff_ = kFirstBackoff;
}

bool EndpointFailover::Tries::begin() {
  failover_.throw_if_abandoned(what_);
  const auto now = failover_.clock_.now();
  if (now >= until_) return false;
  index_ = failover_.current();
  // In an outage older than request_timeout each member still gets one try, of its share of request_timeout.
  const auto last_pass = inherited_outage_
                             ? now + std::min<store::Duration>(failover_.attempt_timeout_,
                                                               failover_.give_up_after_ / failover_.endpoints_.size())
                             : TimePoint::min();
  deadline_ = std::min({until_, std::max(give_up_at(), last_pass), now + failover_.attempt_timeout_});
  return true;
}

void EndpointFailover::Tries::failed(const std::string& error) {
  last_error_ = fmt::format("{}: {}", endpoint().to_string(), error);
  log::get("rdzv")->debug("etcd {}: {}; trying the next endpoint", what_, last_error_);
  failover_.move_on_from(index_);
  const auto now = failover_.clock_.now();
  if (!failing_since_) failing_since_ = now;
  failover_.outage_seen(now);
  ++failures_;
  if (now >= until_) return;
  failover_.throw_if_abandoned(what_);
  // An inherited outage: not before this request tried every member once.
  if (now >= give_up_at() && (!inherited_outage_ || failures_ >= failover_.endpoints_.size()))
    throw store::StoreError(fmt::format(
        "etcd {} failed: no member of the etcd cluster at {} answered within {:.1f} s (last error: {}). Check that "
        "the etcd cluster is up and --rdzv-endpoint lists its client URLs",
        what_, failover_.endpoints(), std::chrono::duration<double>(failover_.give_up_after_).count(), last_error_));
  if (failures_ % failover_.endpoints_.size() == 0) {  // every member failed once: wait before the next pass
    failover_.pause(std::clamp<std::chrono::steady_clock::duration>(
        std::min(until_, give_up_at()) - now, std::chrono::steady_clock::duration::zero(), backoff_));
    backoff_ = std::min(backoff_ * 2, kMaxBackoff);
  }
}

}  // namespace ctrun::rdzv::etcd
