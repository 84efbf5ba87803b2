#pragma once
// The metrics a program exposes, as plain values: what an owner hands to its metrics endpoint (endpoint.hpp) when
// it is scraped. Owners keep their own numbers (per-loop counters, published snapshots) and turn them into these on
// demand, so nothing on their hot paths knows about Prometheus; its text format is written in text_format.cpp only.

#include <string>
#include <utility>
#include <vector>

namespace ctrun::metrics {

enum class Type { kCounter, kGauge };

struct Sample {
  std::vector<std::pair<std::string, std::string>> labels;  // (name, value)
  double value = 0;
};

// One metric name with its help text, type and every labelled sample of it.
struct Family {
  std::string name;  // counters end in _total (Prometheus' convention, checked by promtool)
  std::string help;
  Type type = Type::kGauge;
  std::vector<Sample> samples;

  Family& add(double value, std::vector<std::pair<std::string, std::string>> labels = {}) {
    samples.push_back({std::move(labels), value});
    return *this;
  }
};

using Families = std::vector<Family>;

inline Family counter(std::string name, std::string help) {
  return {std::move(name), std::move(help), Type::kCounter, {}};
}
inline Family gauge(std::string name, std::string help) { return {std::move(name), std::move(help), Type::kGauge, {}}; }

}  // namespace ctrun::metrics
