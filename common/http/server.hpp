#pragma once
// A small HTTP server for read-only views (the agent's live table of its job, Prometheus' /metrics): GET routes
// served with Boost.Beast on an Asio loop. Every accept, read and write is asynchronous, so a slow or hostile client
// never blocks the loop it runs on: the owner's own loop (the agent's live view, which then costs a job no thread at
// start or exit) or a thread of the server's own (owners without a loop to lend).
//
// Bounded as the store is: at most `connections` are served at once (further clients wait in the kernel's listen
// backlog until one ends); one request per connection; a request head of at most `max_request_bytes` (larger: the
// connection is closed, others are served on), which must arrive within `request_timeout` (a stalled or trickling
// client is cut off then; the same timeout bounds writing the reply); a route that has not answered within
// `reply_timeout` gets its client a 503.

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>

namespace boost::asio {
class io_context;
}

namespace ctrun::http {

struct ServerBounds {
  int connections = 8;
  int backlog = 16;
  std::size_t max_request_bytes = 4096;
  std::chrono::milliseconds request_timeout{2000};
  std::chrono::milliseconds reply_timeout{10000};
};

struct Reply {
  std::string content_type;  // e.g. "text/plain; charset=utf-8"
  std::string body;
  int status = 200;
};

// Answers one request: call it once, from any thread (a later call, or one after the server stopped, is ignored).
using Respond = std::function<void(Reply)>;
// path -> what to do with a GET of exactly that path (others get 404; a query string is ignored). Called on the
// server's loop: it answers at once or later (e.g. once the owner's loop has collected what was asked); an exception
// it throws is answered 500 with its message.
using Route = std::function<void(Respond)>;
using Routes = std::map<std::string, Route>;

// A route that answers at once with what `answer` returns (500 with the message when it throws).
Route answer_now(std::function<Reply()> answer);

class Server {
 public:
  // Serves on `io`, the owner's loop. Construct, use and destroy it on that loop's thread (or while the loop is not
  // running).
  Server(boost::asio::io_context& io, const std::string& host, std::uint16_t port, Routes routes,
         ServerBounds bounds = {});
  // Serves on a thread of its own, started here; the routes are called there.
  Server(const std::string& host, std::uint16_t port, Routes routes, ServerBounds bounds = {});
  // Listens on host:port (an IP address or a name; port 0: a free one, see port()); throws std::runtime_error naming
  // the address when it cannot. Destruction closes the listener and every connection at once (a route running on
  // the server's own thread finishes first); a route's later answer is dropped.
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  std::uint16_t port() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ctrun::http
