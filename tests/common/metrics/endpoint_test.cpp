// common/metrics: Prometheus' text format as written (escapes, specials, labels), and the endpoint serves what
// `collect` returns and stops promptly (prometheus-cpp's civetweb 1.15 alone held every ctrun --metrics-port run's
// exit for up to 2 s after its first scrape).
#include "common/metrics/endpoint.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <limits>

#include "common/http/client.hpp"
#include "common/metrics/text_format.hpp"

namespace ctrun::metrics {
namespace {

TEST(MetricsTextFormat, WritesHelpTypeAndEscapedSamples) {
  Family c = counter("ctrun_exits_total", "worker exits\nby \\ outcome");
  c.add(3, {{"outcome", "failed"}, {"note", "a \"quoted\"\\ line\nbreak"}});
  Family g = gauge("ctrun_lag_seconds", "lag");
  g.add(0.25).add(std::numeric_limits<double>::infinity(), {{"rank", "1"}});
  g.add(std::numeric_limits<double>::quiet_NaN(), {{"rank", "2"}});
  EXPECT_EQ(to_text({c, g}),
            "# HELP ctrun_exits_total worker exits\\nby \\\\ outcome\n"
            "# TYPE ctrun_exits_total counter\n"
            "ctrun_exits_total{outcome=\"failed\",note=\"a \\\"quoted\\\"\\\\ line\\nbreak\"} 3\n"
            "# HELP ctrun_lag_seconds lag\n"
            "# TYPE ctrun_lag_seconds gauge\n"
            "ctrun_lag_seconds 0.25\n"
            "ctrun_lag_seconds{rank=\"1\"} +Inf\n"
            "ctrun_lag_seconds{rank=\"2\"} NaN\n");
}

TEST(MetricsEndpoint, ServesCollectAndStopsPromptly) {
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < 5; ++i) {
    EndpointOptions o;
    o.host = "127.0.0.1";
    Endpoint endpoint(o, [i] {
      Family f = gauge("ctrun_test_round", "which round of the test");
      f.samples.push_back({{}, static_cast<double>(i)});
      return Families{f};
    });
    EXPECT_EQ(endpoint.url(), "http://127.0.0.1:" + std::to_string(endpoint.port()) + "/metrics");
    const std::string body = http::get("127.0.0.1", endpoint.port(), "/metrics");
    EXPECT_NE(body.find("ctrun_test_round " + std::to_string(i)), std::string::npos) << body;
  }
  // Five cycles of start, one scrape, stop: 10 s with civetweb's own stop, now each a close.
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 1.0);
}

// --metrics-port may listen on an address other hosts reach: it serves the metrics (and /healthz when asked) and
// nothing else of the job, whatever routes the agent's other servers have (the live view, stacks, the job's page).
TEST(MetricsEndpoint, ServesMetricsAndHealthOnly) {
  EndpointOptions o;
  o.host = "127.0.0.1";
  o.healthz = [] { return std::make_pair(200, std::string("ok\n")); };
  Endpoint endpoint(o, [] { return Families{}; });
  EXPECT_NO_THROW(http::get("127.0.0.1", endpoint.port(), "/metrics"));
  EXPECT_EQ(http::get("127.0.0.1", endpoint.port(), "/healthz"), "ok\n");
  for (const char* path : {"/", "/stacks", "/status.json", "/job", "/logs", "/metrics/../stacks"})
    EXPECT_THROW(http::get("127.0.0.1", endpoint.port(), path), std::runtime_error) << path;
}

}  // namespace
}  // namespace ctrun::metrics
