#pragma once
// The live view of a running job: a tiny HTTP/1.0 server on its own thread that answers GET / (the text table)
// and GET /status.json (the same as JSON) from the snapshot the agent last published (publish(), called on the
// agent's loop after each HangWatch tick: one string copy under a mutex, never a wait). Its own thread, so a
// slow or malicious client can never stall the agent's loop; one request per connection, a bounded request size
// (4 KiB) and a 2 s deadline per connection. Binds 127.0.0.1 by default (no authentication: the table names
// hosts and pids) on port 0; the port actually bound is port() (the agent writes it into the log dir).

#include <memory>
#include <string>

namespace ctrun::agent::hang {

class StatusServer {
 public:
  // Throws std::runtime_error when it cannot listen.
  explicit StatusServer(const std::string& host = "127.0.0.1", int port = 0);
  ~StatusServer();  // stops the thread within its poll slice (100 ms)
  StatusServer(const StatusServer&) = delete;
  StatusServer& operator=(const StatusServer&) = delete;

  int port() const;
  void publish(std::string text, std::string json);

 private:
  struct State;
  std::shared_ptr<State> state_;
};

// A GET of `path` from host:port (the `ctrun --status` client and tests): the body, or throws
// std::runtime_error saying what failed. Bounded by `timeout_ms` in all.
std::string http_get(const std::string& host, int port, const std::string& path, int timeout_ms = 2000);

}  // namespace ctrun::agent::hang
