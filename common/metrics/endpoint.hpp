#pragma once
// `--metrics-port`: Prometheus' text exposition at GET /metrics, served by prometheus-cpp's Exposer (civetweb) on
// threads of its own, so a scrape never runs on the owner's event loop: each scrape calls `collect` on one of those
// threads, and the owner answers from a snapshot (a mutex-guarded copy, or a bounded hop onto its own loop).
//
// Bounded as the store is (docs/cli.md "Metrics"): at most `threads` connections are served at once (civetweb's
// worker threads), at most `queued` more accepted ones wait for a thread, further clients wait in the kernel's
// listen backlog (`backlog`); one request per connection (no keep-alive); a request's head is at most
// `max_request_bytes` (larger: an error reply and the connection closed) and must arrive within `request_timeout`
// (a stalled or trickling client is cut off then; it also bounds writing the reply). A scrape is one short
// request, so the timeout is short: a few stalled clients delay the next scrape by at most
// ceil(stalled / threads) * request_timeout, and hold no memory beyond `threads` request buffers.
// Built without prometheus-cpp (CTRUN_WITH_METRICS=OFF), the constructor throws saying so.

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "common/metrics/families.hpp"

namespace ctrun::metrics {

struct EndpointOptions {
  std::string host = "0.0.0.0";  // as the store binds: an IPv4 address or a name; "::" is every IPv4 address
  std::uint16_t port = 0;        // 0: a free port, reported by port()
  int threads = 4;
  int queued = 16;
  int backlog = 16;
  std::size_t max_request_bytes = 8192;
  std::chrono::milliseconds request_timeout{10000};
};

class Endpoint {
 public:
  // Binds and starts serving; throws std::runtime_error naming the address when it cannot.
  Endpoint(EndpointOptions options, std::function<Families()> collect);
  ~Endpoint();  // stops the threads; a scrape in progress finishes first
  Endpoint(const Endpoint&) = delete;
  Endpoint& operator=(const Endpoint&) = delete;

  std::uint16_t port() const;
  // "http://HOST:PORT/metrics" (an IPv6 host bracketed), for the log line and the event log.
  std::string url() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Whether this build serves metrics (CTRUN_WITH_METRICS).
bool available();

}  // namespace ctrun::metrics
