#pragma once
// --stop-without-progress: whether an attempt made progress, and how many failed attempts in a row made none. Pure:
// the loop hands it what the attempt started from and what it reached, and asks it what to say and whether to stop
// (tests/agent/policy/progress_policy_test.cpp runs every case).
//
// Progress is a newer checkpoint step committed by every local rank than the one the attempt started from (what the
// keeper lists for the next attempt). A job without ctrun's checkpoints (none committed so far) makes progress in an
// attempt whose ranks got past the start-up: kCollectivesForProgress collectives of one group on one local rank
// (ctrun's progress records, backend "ctrun"; the same warm-up --hang-timeout auto waits for: the first ones are
// init's and the parameter broadcasts). A job with neither shows no progress.
// An attempt that made some resets the count; a failed one that made none adds one (a new round of a membership
// change is not a failure: it counts nothing unless it made progress).

#include <cstdint>
#include <optional>
#include <string>

namespace ctrun::agent {

inline constexpr std::uint64_t kCollectivesForProgress = 10;

// The rule alone: did an attempt that started from `start_step` and ended holding `end_step`, with `collectives`
// completed by its busiest group on one local rank, make progress?
bool made_progress(std::optional<std::int64_t> start_step, std::optional<std::int64_t> end_step,
                   std::uint64_t collectives);

class ProgressCount {
 public:
  // The attempt starts from `step` (the newest step every local rank holds; nullopt: none).
  void attempt_started(std::optional<std::int64_t> step) { start_step_ = step; }
  // The attempt's workers are gone: count it.
  void attempt_ended(std::optional<std::int64_t> end_step, std::uint64_t collectives, bool failure_seen);

  // Failed attempts in a row without progress (the first attempt included: N restarts without progress make N+1).
  int failed_in_a_row() const { return failed_in_a_row_; }
  // --stop-without-progress N (0: off): N restarts in a row made none.
  bool stalled(int most) const { return most > 0 && failed_in_a_row_ > most; }
  std::optional<std::int64_t> start_step() const { return start_step_; }
  // What "no progress" meant for the last attempt, for the messages: "no checkpoint step newer than 12", or the
  // collectives' count against kCollectivesForProgress.
  std::string baseline(std::uint64_t collectives) const;

 private:
  std::optional<std::int64_t> start_step_;
  int failed_in_a_row_ = 0;
};

}  // namespace ctrun::agent
