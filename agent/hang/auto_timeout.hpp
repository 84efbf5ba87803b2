#pragma once
// `--hang-timeout auto`: the hang timeout learned from the job itself, as a pure function of this node's records
// over time (no clock, no I/O; the caller passes `now`), tested with a fake clock like the detector.
//
// A healthy gap is the time between two collectives of a group completing on a rank, both seen. A rank waits
// inside a healthy collective at most about one such gap (it issued the op after finishing the previous one), so
// the longest gap seen bounds healthy waits, and the timeout is `multiple` times it, kept within
// [floor_s, ceiling_s]:
//   - floor (default 120 s): the warm-up shows the step's rhythm, not the rare pauses a job has besides (a rank
//     evaluating or writing a checkpoint while the others wait, a slow first batch after an epoch). A learned
//     timeout of a few seconds would fail the first of those; two minutes clears the usual ones. A job with longer
//     rare pauses gives its own floor: `auto:FLOOR`.
//   - ceiling (default 1200 s): a verdict must come before torch's own collective timeout (30 min by default)
//     ends the job naming nobody; a job whose steps take longer than ceiling / multiple sets a number instead.
// Until `warmup` collectives of one group completed on a rank (the first ones include start-up: broadcasts of
// parameters, data loaders starting), the timeout is the ceiling. Gaps are measured from records read twice a
// second: a gap is the time between two reads that saw new completions, taken from when the last op ended
// (`in_state_s`), so it is never shorter than the real longest gap (a longer timeout, never a shorter one).
// Only this node's ranks are used: every rank of a group completes its collectives at the group's pace, and the
// other nodes' summaries arrive seconds apart, which would read as gaps. The learner starts again every attempt.

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "agent/hang/records.hpp"

namespace ctrun::agent::hang {

struct AutoTimeout {
  double multiple = 4;
  double floor_s = 120;
  double ceiling_s = 1200;
  std::uint64_t warmup = 10;  // completed collectives of a group on a rank before the timeout is learned
};

// "auto", "auto:FLOOR", "auto:FLOOR:CEILING" (seconds); nullopt when `text` does not start with "auto". Throws
// std::invalid_argument saying what is wrong (a bad number, a floor above the ceiling).
std::optional<AutoTimeout> parse_auto_timeout(const std::string& text);

// What the learner concluded at one look.
struct Learned {
  double timeout_s = 0;
  double longest_gap_s = 0;                         // 0: no gap seen yet
  std::uint64_t completed = 0;                      // most collectives one group completed on one rank this attempt
  bool warm = false;                                // past the warm-up
  double multiple = 0, floor_s = 0, ceiling_s = 0;  // the rule it applied
};

class TimeoutLearner {
 public:
  explicit TimeoutLearner(AutoTimeout config = {}) : config_(config) {}

  // A new attempt: everything learned goes.
  void reset();
  // One look at this node's ranks (ages as of now_s); returns the timeout to apply now.
  Learned observe(double now_s, const std::vector<RankRecord>& local);
  Learned current() const;
  const AutoTimeout& config() const { return config_; }

 private:
  struct Track {
    std::uint64_t done = 0;  // ops done when last seen
    std::uint64_t first_done = 0;
    double last_end_s = -1;  // when the last op seen done ended (-1: none seen yet)
  };
  AutoTimeout config_;
  std::map<std::pair<int, std::uint64_t>, Track> tracks_;  // by (global rank, group id)
  double longest_gap_s_ = 0;
  std::uint64_t completed_ = 0;
};

}  // namespace ctrun::agent::hang
