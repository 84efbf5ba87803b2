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
//
// Server-sent events (EventStream): a route may keep its client and send it a message each time its owner publishes
// one (the job's page, updated live). Streams do not count against `connections`; each EventStream bounds its own
// clients (one past its bound gets a 503), holds at most one message per client (a client still writing gets only the
// newest once it is done: never a queue), and drops a client that does not take a message within `request_timeout`.

#include <chrono>
#include <concepts>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

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

class EventStream;

// What a route is asked: the path routed on, the query string and the Accept header (a browser asks for text/html).
struct Request {
  std::string path;
  std::string query;   // after '?', "" when none
  std::string accept;  // "" when none
  // The value of `name` in the query ("rank=3&lines=50"), as given (no percent-decoding); nullopt when absent.
  std::optional<std::string> param(std::string_view name) const;
  // Whether the client asks for HTML (its Accept header names text/html), as browsers do and curl does not.
  bool wants_html() const;
};

struct Reply {
  std::string content_type;  // e.g. "text/plain; charset=utf-8"
  std::string body;
  int status = 200;
  std::vector<std::pair<std::string, std::string>> headers;  // more header fields (e.g. Cache-Control)
  // Set: the client stays as a client of this stream (text/event-stream): `body` is its first message, then every
  // message published to the stream. A stream at its bound answers 503 instead.
  std::shared_ptr<EventStream> stream;
};

// Answers one request: call it once, from any thread (a later call, or one after the server stopped, is ignored).
using Respond = std::function<void(Reply)>;

// What to do with a GET of exactly one path: called on the server's loop with the request and a Respond to answer at
// once or later (e.g. once the owner's loop has collected what was asked); an exception it throws is answered 500
// with its message. Made from a callable taking (const Request&, Respond), or (Respond) for routes that need nothing
// of the request.
class Route {
 public:
  Route() = default;
  template <typename F>
    requires std::invocable<F&, const Request&, Respond>
  Route(F f) : call_(std::move(f)) {}  // NOLINT: implicit, as std::function
  template <typename F>
    requires(std::invocable<F&, Respond> && !std::invocable<F&, const Request&, Respond>)
  Route(F f) : call_([f = std::move(f)](const Request&, Respond respond) mutable { f(std::move(respond)); }) {}  // NOLINT
  void operator()(const Request& request, Respond respond) const { call_(request, std::move(respond)); }

 private:
  std::function<void(const Request&, Respond)> call_;
};
// path -> its route (others get 404).
using Routes = std::map<std::string, Route>;

// A route that answers at once with what `answer` returns (500 with the message when it throws).
Route answer_now(std::function<Reply()> answer);
Route answer_now(std::function<Reply(const Request&)> answer);

// Server-sent events from one publisher to at most `max_clients` clients (see the top of this file). Made, published
// to and destroyed on the loop of the server whose routes answer with it.
class EventStream {
 public:
  explicit EventStream(int max_clients);
  ~EventStream();
  EventStream(const EventStream&) = delete;
  EventStream& operator=(const EventStream&) = delete;

  // Sends `message` (whole text/event-stream events: "data: ...\n\n") to every client.
  void publish(std::string message);
  int clients() const;
  int max_clients() const { return max_clients_; }

  // The server's side: a client that takes messages.
  class Client {
   public:
    virtual ~Client() = default;
    virtual void offer(std::shared_ptr<const std::string> message) = 0;
  };
  // False when the stream is at its bound.
  bool join(const std::shared_ptr<Client>& client);

 private:
  int max_clients_;
  std::vector<std::weak_ptr<Client>> clients_;
};

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
