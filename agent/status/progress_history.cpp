#include "agent/status/progress_history.hpp"

#include <algorithm>
#include <cmath>
#include <string>

namespace ctrun::agent::status {
namespace {

constexpr int kMaxRank = 1 << 20;  // a rank past this is not a rank this history keeps a column for

double rounded(double v) { return std::round(v * 100) / 100; }

}  // namespace

ProgressHistory::ProgressHistory(HistoryLimits limits) : limits_(limits) {}

void ProgressHistory::sample(const std::vector<std::pair<int, std::uint64_t>>& counters, double now_s) {
  if (now_s - last_sample_t_ < limits_.interval_s) return;
  std::size_t width = 0;
  for (const auto& [rank, count] : counters)
    if (rank >= 0 && rank < kMaxRank) width = std::max(width, static_cast<std::size_t>(rank) + 1);
  if (width == 0) return;
  if (last_count_.size() < width) {
    last_count_.resize(width, 0);
    last_t_.resize(width, -1);
  }
  Sample s{now_s, -1, std::vector<float>(width, -1.0f)};
  std::vector<float> known;
  for (const auto& [rank, count] : counters) {
    if (rank < 0 || rank >= kMaxRank) continue;
    const auto r = static_cast<std::size_t>(rank);
    if (last_t_[r] >= 0 && count >= last_count_[r] && now_s > last_t_[r]) {
      s.rates[r] = static_cast<float>(static_cast<double>(count - last_count_[r]) / (now_s - last_t_[r]));
      known.push_back(s.rates[r]);
    }
    last_count_[r] = count;
    last_t_[r] = now_s;
  }
  if (!known.empty()) {
    std::nth_element(known.begin(), known.begin() + static_cast<std::ptrdiff_t>(known.size() / 2), known.end());
    s.job = known[known.size() / 2];
  }
  last_sample_t_ = now_s;
  samples_.push_back(std::move(s));
  trim(width);
}

// Oldest samples go first: at most max_samples, and their rates within max_bytes.
void ProgressHistory::trim(std::size_t width) {
  const std::size_t per_sample = std::max<std::size_t>(width * sizeof(float), 1);
  const std::size_t fit = std::max<std::size_t>(limits_.max_bytes / per_sample, 1);
  const std::size_t keep = std::min(limits_.max_samples, fit);
  while (samples_.size() > keep) samples_.pop_front();
  while (samples_.size() > 1 && memory_bytes() > limits_.max_bytes) samples_.pop_front();
}

std::size_t ProgressHistory::memory_bytes() const {
  std::size_t bytes = 0;
  for (const auto& s : samples_) bytes += s.rates.size() * sizeof(float);
  return bytes;
}

std::optional<double> ProgressHistory::rate_of(int rank) const {
  if (samples_.empty() || rank < 0) return std::nullopt;
  const auto& rates = samples_.back().rates;
  if (static_cast<std::size_t>(rank) >= rates.size() || rates[static_cast<std::size_t>(rank)] < 0) return std::nullopt;
  return rates[static_cast<std::size_t>(rank)];
}

std::optional<double> ProgressHistory::job_rate() const {
  if (samples_.empty() || samples_.back().job < 0) return std::nullopt;
  return samples_.back().job;
}

nlohmann::json ProgressHistory::to_json(double now_s, std::size_t last) const {
  const std::size_t n = last == 0 ? samples_.size() : std::min(last, samples_.size());
  const std::size_t first = samples_.size() - n;
  std::size_t width = 0;
  for (std::size_t i = first; i < samples_.size(); ++i) width = std::max(width, samples_[i].rates.size());
  nlohmann::json t = nlohmann::json::array(), job = nlohmann::json::array();
  std::vector<nlohmann::json> columns(width, nlohmann::json::array());
  std::vector<bool> seen(width, false);
  for (std::size_t i = first; i < samples_.size(); ++i) {
    const Sample& s = samples_[i];
    t.push_back(rounded(s.t - now_s));
    job.push_back(s.job < 0 ? nlohmann::json() : nlohmann::json(rounded(s.job)));
    for (std::size_t r = 0; r < width; ++r) {
      const bool has = r < s.rates.size() && s.rates[r] >= 0;
      columns[r].push_back(has ? nlohmann::json(rounded(s.rates[r])) : nlohmann::json());
      if (has) seen[r] = true;
    }
  }
  nlohmann::json ranks = nlohmann::json::object();
  for (std::size_t r = 0; r < width; ++r)
    if (seen[r]) ranks[std::to_string(r)] = std::move(columns[r]);
  return {{"interval_s", limits_.interval_s},
          {"max_samples", limits_.max_samples},
          {"max_bytes", limits_.max_bytes},
          {"memory_bytes", memory_bytes()},
          {"t", std::move(t)},
          {"job", std::move(job)},
          {"ranks", std::move(ranks)}};
}

}  // namespace ctrun::agent::status
