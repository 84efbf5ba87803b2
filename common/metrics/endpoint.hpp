#pragma once
// `--metrics-port`: Prometheus' text exposition at GET /metrics (text_format.hpp), served by common/http's Beast
// server on a thread of its own, started only when a program is given --metrics-port (a program without it loads and
// starts nothing for metrics). Each scrape calls `collect` on that thread, and the owner answers from a snapshot (a
// mutex-guarded copy, or a bounded hop onto its own loop), so a scrape never runs on the owner's event loop.
//
// Bounded as the store is (docs/cli.md "Metrics"): at most `connections` are served at once, further clients wait in
// the kernel's listen backlog (`backlog`); one request per connection (no keep-alive); a request's head is at most
// `max_request_bytes` (larger: the connection is closed) and must arrive within `request_timeout` (a stalled or
// trickling client is cut off then; it also bounds writing the reply). A scrape is one short request, so the timeout
// is short: stalled clients hold at most `connections` places and small buffers, each for at most request_timeout.

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>

#include "common/metrics/families.hpp"

namespace ctrun::metrics {

struct EndpointOptions {
  std::string host = "0.0.0.0";  // as the store binds: an IPv4 address or a name; "::" is every IPv4 address
  std::uint16_t port = 0;        // 0: a free port, reported by port()
  int connections = 16;
  int backlog = 16;
  std::size_t max_request_bytes = 8192;
  std::chrono::milliseconds request_timeout{10000};
  // When set, GET /healthz answers with its (HTTP status, text body): a liveness probe beside the metrics.
  std::function<std::pair<int, std::string>()> healthz;
};

class Endpoint {
 public:
  // Binds and starts serving; throws std::runtime_error naming the address when it cannot.
  Endpoint(EndpointOptions options, std::function<Families()> collect);
  ~Endpoint();  // stops serving; a scrape in progress finishes first
  Endpoint(const Endpoint&) = delete;
  Endpoint& operator=(const Endpoint&) = delete;

  std::uint16_t port() const;
  // "http://HOST:PORT/metrics" (an IPv6 host bracketed), for the log line and the event log.
  std::string url() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ctrun::metrics
