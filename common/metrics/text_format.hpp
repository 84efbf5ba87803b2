#pragma once
// Prometheus' text exposition format (version 0.0.4), the body of GET /metrics: a HELP and a TYPE line per family,
// then one line per sample. Pure, so that the format is tested without a server (and checked by promtool in
// tests/integration/metrics_test.py).

#include <string>

#include "common/metrics/families.hpp"

namespace ctrun::metrics {

// The Content-Type that goes with it.
inline constexpr const char* kTextContentType = "text/plain; version=0.0.4; charset=utf-8";

std::string to_text(const Families& families);

}  // namespace ctrun::metrics
