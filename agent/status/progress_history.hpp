#pragma once
// Progress over time for the job's page: each rank's collectives per second, one sample a second at most, the last
// five minutes, and the job's throughput (the median rank's rate). Fed by the hang watch's ticks (the ranks' progress
// records: every rank on group rank 0's agent), read by the renderings. Its memory is capped: samples hold a float per
// rank, and the history keeps fewer samples when the job has more ranks than fit (2 MiB: five minutes up to 1,747
// ranks; two minutes at 4,369). Pure: the caller passes the clock.

#include <cstddef>
#include <cstdint>
#include <deque>
#include <optional>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace ctrun::agent::status {

struct HistoryLimits {
  double interval_s = 1;                  // a sample at most this often
  std::size_t max_samples = 300;          // five minutes at one a second
  std::size_t max_bytes = 2u << 20;       // every sample's rates together
};

class ProgressHistory {
 public:
  explicit ProgressHistory(HistoryLimits limits = {});

  // Every rank's collectives completed so far (rank, count), as of now_s: a sample when one is due. A count lower
  // than the rank's last one (a new attempt's workers) starts that rank anew: no rate for it in that sample.
  void sample(const std::vector<std::pair<int, std::uint64_t>>& counters, double now_s);

  // The newest sample's rate of `rank` (collectives per second), nullopt when none.
  std::optional<double> rate_of(int rank) const;
  // The newest sample's job throughput (the median rank's rate).
  std::optional<double> job_rate() const;
  std::size_t samples() const { return samples_.size(); }
  // What the samples hold now (bytes), at most limits().max_bytes.
  std::size_t memory_bytes() const;
  const HistoryLimits& limits() const { return limits_; }

  // {"interval_s", "max_samples", "max_bytes", "memory_bytes", "t": [seconds before now_s, oldest first],
  //  "job": [...], "ranks": {"<rank>": [rate or null, ...]}}: the last `last` samples (all when 0), rates rounded.
  nlohmann::json to_json(double now_s, std::size_t last = 0) const;

 private:
  struct Sample {
    double t = 0;
    float job = -1;            // -1: no rank had a rate
    std::vector<float> rates;  // by rank; -1: none
  };
  void trim(std::size_t width);

  HistoryLimits limits_;
  std::deque<Sample> samples_;
  std::vector<std::uint64_t> last_count_;  // by rank
  std::vector<double> last_t_;             // by rank; < 0: none yet
  double last_sample_t_ = -1e18;
};

}  // namespace ctrun::agent::status
