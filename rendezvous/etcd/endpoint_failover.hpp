#pragma once
// Which etcd member a client talks to, and what it does when that member fails. Every request and every watch of a
// client goes through its one EndpointFailover, so a member that failed one of them is skipped by the next.
//
// A try that fails with a TransientError moves to the next member. After each full pass of failures over the
// members the next pass waits (50 ms, doubling up to 1 s), so that a cluster in an election is not hammered. A
// stretch of failures lasting request_timeout ends the request with a store::StoreError that names every member and
// the last error; the stretch starts with the request, and again at the first failure after a member answered (a
// watch can stream for longer than request_timeout and then lose its member).
//
// The client remembers an outage: from a failure until some request is answered. A request that starts during one
// counts its stretch from the outage's start, so once the cluster has been unreachable for request_timeout every
// later request gives up after one try of each member instead of waiting request_timeout again. (An agent over a
// dead cluster would otherwise spend read_timeout on each of its heartbeat, its join and its close in turn.)

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <functional>
#include <limits>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "rendezvous/clock.hpp"
#include "rendezvous/etcd/etcd_error.hpp"
#include "rendezvous/etcd/etcd_options.hpp"

namespace ctrun::rdzv::etcd {

class EndpointFailover {
 public:
  using Sleep = std::function<void(std::chrono::steady_clock::duration)>;

  // Starts at a random member, as etcd's own clients do, so that clients spread over the cluster. Real time.
  explicit EndpointFailover(const Options& options);
  // Starts at endpoints[first]; reads time from clock and waits through sleep (tests pass a fake clock).
  EndpointFailover(const Options& options, std::size_t first, const Clock& clock, Sleep sleep);

  std::size_t current() const { return current_.load(); }  // the index of the member in use
  std::string endpoints() const;                           // "a:1,b:2", for messages

  // From any thread, when the owner is going away (an agent leaving over a dead cluster): the request under way
  // ends with a store::StoreError after its current try instead of retrying for request_timeout, and so does every
  // later one. A backoff wait under way ends at once.
  void abandon();

  // One request's (or one watch's) tries, as the attempt sees them.
  class Tries {
   public:
    const Endpoint& endpoint() const { return failover_.endpoints_[index_]; }
    // This try's answer is due by then: attempt_timeout from its start, never past the give-up time or `until`.
    TimePoint deadline() const { return deadline_; }
    // The member answered (a watch's message): a later failure starts a new stretch, from the first backoff.
    void answered();

   private:
    friend class EndpointFailover;
    Tries(EndpointFailover& failover, std::string what, TimePoint until);
    bool begin();                           // false: `until` has passed; throws once abandoned
    void failed(const std::string& error);  // moves on, waits after a full pass, or throws store::StoreError
    TimePoint give_up_at() const;

    EndpointFailover& failover_;
    std::string what_;
    TimePoint until_;
    std::size_t index_ = 0;
    TimePoint deadline_{};
    std::optional<TimePoint> failing_since_;
    std::size_t failures_ = 0;
    bool inherited_outage_ = false;  // the stretch began before this request, in another one's failures
    std::chrono::milliseconds backoff_;
    std::string last_error_;
  };

  // Calls attempt(tries) until it returns, trying the next member after each TransientError. `what` names the
  // request in logs and errors. Returns nullopt when `until` passes first.
  template <class F>
  auto run_until(const std::string& what, TimePoint until, F&& attempt)
      -> std::optional<decltype(attempt(std::declval<Tries&>()))> {
    Tries tries(*this, what, until);
    while (tries.begin()) {
      try {
        auto answer = attempt(tries);
        outage_ended();
        return answer;
      } catch (const TransientError& e) {
        tries.failed(e.what());
      }
    }
    return std::nullopt;
  }

  template <class F>
  auto run(const std::string& what, F&& attempt) {
    return *run_until(what, TimePoint::max(), std::forward<F>(attempt));
  }

 private:
  void move_on_from(std::size_t index);
  void outage_seen(TimePoint at);  // a try failed: the outage starts now, unless one is under way
  void outage_ended();             // a member answered
  std::optional<TimePoint> outage_since() const;
  void throw_if_abandoned(const std::string& what) const;
  void pause(std::chrono::steady_clock::duration d);  // sleep_, or a real wait that abandon() ends

  std::vector<Endpoint> endpoints_;
  store::Duration give_up_after_, attempt_timeout_;
  const Clock& clock_;
  Sleep sleep_;  // empty: pause() waits on abandoned_cv_
  std::atomic<std::size_t> current_;
  static constexpr TimePoint::rep kNoOutage = std::numeric_limits<TimePoint::rep>::max();
  std::atomic<TimePoint::rep> outage_since_{kNoOutage};  // TimePoint's count: atomics take no time_point
  std::atomic<bool> abandoned_{false};
  std::mutex abandon_mutex_;
  std::condition_variable abandoned_cv_;
};

}  // namespace ctrun::rdzv::etcd
