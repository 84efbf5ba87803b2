#pragma once
// A small HTTP server for read-only views (the agent's live table of its job): GET routes answered from the
// owner's snapshot on civetweb's own threads, so a client never runs on the owner's event loop. civetweb is the
// library prometheus-cpp serves /metrics with (common/metrics/endpoint.*); both take their bounds from
// `ServerBounds` through civetweb_options().
//
// Bounded as the store is: at most `threads` connections are served at once, `queued` more accepted ones wait
// for a thread, further clients wait in the kernel's listen backlog; one request per connection; a request head
// of at most `max_request_bytes`, which must arrive within `request_timeout` (a stalled client is cut off then).
// Built without civetweb (CTRUN_WITH_METRICS=OFF), the constructor throws saying so.

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace ctrun::http {

struct ServerBounds {
  int threads = 2;
  int queued = 8;
  int backlog = 16;
  std::size_t max_request_bytes = 4096;
  std::chrono::milliseconds request_timeout{2000};
};

// civetweb's options for `host:port` (a numeric IPv4 address) under `bounds`, keep-alive off.
std::vector<std::string> civetweb_options(const std::string& host, std::uint16_t port, const ServerBounds& bounds);

struct Reply {
  std::string content_type;  // e.g. "text/plain; charset=utf-8"
  std::string body;
};

// path -> what to answer; called on a server thread for each GET of exactly that path (others get 404).
using Routes = std::map<std::string, std::function<Reply()>>;

class Server {
 public:
  // Listens on host:port (port 0: a free one, see port()); throws std::runtime_error naming the address when it
  // cannot.
  Server(const std::string& host, std::uint16_t port, Routes routes, ServerBounds bounds = {});
  ~Server();  // stops the threads; a request in progress finishes first
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  std::uint16_t port() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Runs `stop` (which stops a civetweb server listening on host:port) and returns when it has. civetweb 1.15's
// mg_stop waits for its accept loop's poll, up to 2 s (civetweb issue 1163, fixed in 1.16; Debian bookworm has
// 1.15): connecting to the listener while it stops wakes that poll, so stopping takes milliseconds and a ctrun
// that ends is not held 2 s by its HTTP listeners. host "0.0.0.0" is reached at 127.0.0.1.
void stop_promptly(const std::function<void()>& stop, const std::string& host, std::uint16_t port);

// Whether this build has an HTTP server and client (civetweb and libcurl: CTRUN_WITH_METRICS).
bool available();

}  // namespace ctrun::http
