// common/metrics: the endpoint serves what `collect` returns, and stops promptly (prometheus-cpp's civetweb 1.15
// alone held every ctrun --metrics-port run's exit for up to 2 s after its first scrape).
#include "common/metrics/endpoint.hpp"

#include <gtest/gtest.h>

#include <chrono>

#include "common/http/client.hpp"

namespace ctrun::metrics {
namespace {

TEST(MetricsEndpoint, ServesCollectAndStopsPromptly) {
  if (!available()) GTEST_SKIP() << "built with -DCTRUN_WITH_METRICS=OFF";
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < 5; ++i) {
    EndpointOptions o;
    o.host = "127.0.0.1";
    Endpoint endpoint(o, [i] {
      Family f = gauge("ctrun_test_round", "which round of the test");
      f.samples.push_back({{}, static_cast<double>(i)});
      return Families{f};
    });
    const std::string body = http::get("127.0.0.1", endpoint.port(), "/metrics");
    EXPECT_NE(body.find("ctrun_test_round " + std::to_string(i)), std::string::npos) << body;
  }
  // Five cycles of start, one scrape, stop: 10 s before stop_promptly(), about 0.1 s after.
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 5.0);
}

}  // namespace
}  // namespace ctrun::metrics
