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
                       steady_clock(), [](std::chrono::steady_clock::duration d) { std::this_thread::sleep_for(d); }) {}

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

// Unless another request already moved on from that member.
void EndpointFailover::move_on_from(std::size_t index) {
  current_.compare_exchange_strong(index, (index + 1) % endpoints_.size());
}

EndpointFailover::Tries::Tries(EndpointFailover& failover, std::string what, TimePoint until)
    : failover_(failover),
      what_(std::move(what)),
      until_(until),
      failing_since_(failover.clock_.now()),
      backoff_(kFirstBackoff) {}

TimePoint EndpointFailover::Tries::give_up_at() const {
  return failing_since_ ? *failing_since_ + failover_.give_up_after_ : TimePoint::max();
}

void EndpointFailover::Tries::answered() {
  failing_since_.reset();
  failures_ = 0;
  backoff_ = kFirstBackoff;
}

bool EndpointFailover::Tries::begin() {
  const auto now = failover_.clock_.now();
  if (now >= until_) return false;
  index_ = failover_.current();
  deadline_ = std::min({until_, give_up_at(), now + failover_.attempt_timeout_});
  return true;
}

void EndpointFailover::Tries::failed(const std::string& error) {
  last_error_ = fmt::format("{}: {}", endpoint().to_string(), error);
  log::get("rdzv")->debug("etcd {}: {}; trying the next endpoint", what_, last_error_);
  failover_.move_on_from(index_);
  const auto now = failover_.clock_.now();
  if (!failing_since_) failing_since_ = now;
  if (now >= until_) return;
  if (now >= give_up_at())
    throw store::StoreError(fmt::format(
        "etcd {} failed: no member of the etcd cluster at {} answered within {:.1f} s (last error: {}). Check that "
        "the etcd cluster is up and --rdzv-endpoint lists its client URLs",
        what_, failover_.endpoints(), std::chrono::duration<double>(failover_.give_up_after_).count(), last_error_));
  if (++failures_ % failover_.endpoints_.size() == 0) {  // every member failed once: wait before the next pass
    failover_.sleep_(std::min<std::chrono::steady_clock::duration>(backoff_, std::min(until_, give_up_at()) - now));
    backoff_ = std::min(backoff_ * 2, kMaxBackoff);
  }
}

}  // namespace ctrun::rdzv::etcd
