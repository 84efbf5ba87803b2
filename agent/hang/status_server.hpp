#pragma once
// The live view of a running job: GET / (the text table) and GET /status.json (the same as JSON), answered from
// the snapshot the agent last published (publish(), called on the agent's loop after each HangWatch tick: one
// string copy under a mutex, never a wait); and GET /stacks, every local rank's Python stack now, from `stacks`
// (called on a server thread; it may wait, bounded, for the agent's loop to collect them). Served by common/http
// (civetweb) on threads of its own, so a slow or malicious client can never stall the agent's loop; its bounds are
// ServerBounds' defaults (two threads, 4 KiB requests, 2 s per request). Binds 127.0.0.1 by default (no authentication:
// the table names hosts and pids) on port 0; the port actually bound is port() (the agent writes it into the log dir,
// where `ctrun --status` finds it).

#include <functional>
#include <memory>
#include <string>

namespace ctrun::agent::hang {

class StatusServer {
 public:
  // Throws std::runtime_error when it cannot listen (or the build has no HTTP server).
  explicit StatusServer(std::function<std::string()> stacks = {}, const std::string& host = "127.0.0.1", int port = 0);
  ~StatusServer();
  StatusServer(const StatusServer&) = delete;
  StatusServer& operator=(const StatusServer&) = delete;

  int port() const;
  void publish(std::string text, std::string json);

 private:
  struct State;
  std::shared_ptr<State> state_;
};

}  // namespace ctrun::agent::hang
