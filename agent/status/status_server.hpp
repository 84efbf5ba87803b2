#pragma once
// The live view of a running job over HTTP, every answer rendered from the model when asked (a job nobody watches
// pays for no rendering):
//   GET /              the job's page to a browser (its Accept header names text/html), else the text table
//                      (`ctrun --status`, curl); /index.html: the page always
//   GET /status.json   the model as JSON                   GET /progress.json  the progress history
//   GET /events        the model pushed every second (server-sent events, the page's live updates): at most
//                      kMaxViewers at once, the next one gets a 503
//   GET /stacks        every local rank's Python stack now (answered later, once a tick has collected them)
//   GET /logs?rank=R&lines=N   the tail of local rank R's log files (R: a global rank, or "all")
// Anything else: 404. Served by common/http on the agent's own loop: no thread is started or joined for it, so a
// job's start and exit never wait for a listener, and every step of a request is asynchronous there, so a slow or
// vanished client can never stall the loop (a viewer that does not take a message within 2 s is dropped). Bounds:
// ServerBounds' defaults (8 requests at once, 4 KiB requests, 2 s per request, 10 s for an answer) plus the viewers.
// Binds 127.0.0.1 by default (no authentication: the view names hosts, pids and log lines) on port 0; the port
// actually bound is port() (the agent writes it into the log dir, where `ctrun --status` finds it).

#include <functional>
#include <memory>
#include <optional>
#include <string>

namespace boost::asio {
class io_context;
}

namespace ctrun::agent::status {

inline constexpr int kMaxViewers = 8;

class StatusServer {
 public:
  // Answers a request for stacks: call it once with the text.
  using StacksAnswer = std::function<void(std::string)>;
  // What the routes render, each called on the loop when asked.
  struct Pages {
    std::function<std::string()> text;
    std::function<std::string()> json;
    std::function<std::string()> html;
    std::function<std::string()> progress;
    // The log tail of `rank` ("all": every local rank), `lines` lines at most; nullopt: no such rank on this node.
    std::function<std::optional<std::string>(const std::string& rank, int lines)> logs;
    std::function<void(StacksAnswer)> stacks;
    std::function<void()> viewer_joined;  // a client of /events came (the owner pushes while viewers() > 0)
  };

  // On `io`, the agent's loop: construct, push and destroy it there. Throws std::runtime_error when it cannot listen.
  StatusServer(boost::asio::io_context& io, Pages pages, const std::string& host = "127.0.0.1", int port = 0);
  ~StatusServer();
  StatusServer(const StatusServer&) = delete;
  StatusServer& operator=(const StatusServer&) = delete;

  int port() const;
  // Clients of /events now.
  int viewers() const;
  // Sends the model (JSON, one line) to every viewer of /events.
  void push(const std::string& json);

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace ctrun::agent::status
