#pragma once
// Time for the rendezvous state machines. The logic reads time only through Clock, so tests drive it with a fake
// clock and never sleep; the handlers use the steady clock.

#include <atomic>
#include <chrono>

namespace ctrun::rdzv {

using TimePoint = std::chrono::steady_clock::time_point;

class Clock {
 public:
  virtual ~Clock() = default;
  virtual TimePoint now() const = 0;
};

class SteadyClock final : public Clock {
 public:
  TimePoint now() const override { return std::chrono::steady_clock::now(); }
};

// A clock that moves only when told to (tests).
class FakeClock final : public Clock {
 public:
  TimePoint now() const override { return TimePoint(std::chrono::steady_clock::duration(ticks_.load())); }
  void advance(std::chrono::steady_clock::duration d) { ticks_ += d.count(); }

 private:
  std::atomic<std::chrono::steady_clock::rep> ticks_{
      std::chrono::duration_cast<std::chrono::steady_clock::duration>(std::chrono::hours(1)).count()};
};

}  // namespace ctrun::rdzv
