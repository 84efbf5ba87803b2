#pragma once
// The live view of a running job: GET / (the text table) and GET /status.json (the same as JSON), answered from
// the snapshot the agent last published (publish(), after each HangWatch tick); and GET /stacks, every local rank's
// Python stack now, from `stacks` (which answers later, once a tick has collected them). Served by common/http on
// the agent's own loop: no thread is started or joined for it, so a job's start and exit never wait for a listener,
// and every step of a request is asynchronous there, so a slow or malicious client can never stall the loop. Its
// bounds are ServerBounds' defaults (8 connections, 4 KiB requests, 2 s per request, 10 s for an answer). Binds
// 127.0.0.1 by default (no authentication: the table names hosts and pids) on port 0; the port actually bound is
// port() (the agent writes it into the log dir, where `ctrun --status` finds it).

#include <functional>
#include <memory>
#include <string>

namespace boost::asio {
class io_context;
}

namespace ctrun::agent::status {

class StatusServer {
 public:
  // Answers a request for stacks: call it once with the text.
  using StacksAnswer = std::function<void(std::string)>;

  // On `io`, the agent's loop: construct, publish and destroy it there. Throws std::runtime_error when it cannot
  // listen.
  StatusServer(boost::asio::io_context& io, std::function<void(StacksAnswer)> stacks = {},
               const std::string& host = "127.0.0.1", int port = 0);
  ~StatusServer();
  StatusServer(const StatusServer&) = delete;
  StatusServer& operator=(const StatusServer&) = delete;

  int port() const;
  void publish(std::string text, std::string json);

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace ctrun::agent::status
