#include "common/http/server.hpp"

#include <array>
#include <optional>
#include <stdexcept>
#include <thread>
#include <unordered_map>
#include <vector>

#include <fmt/format.h>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ip/v6_only.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

namespace ctrun::http {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace bhttp = beast::http;
using tcp = asio::ip::tcp;

// host:port as the store binds it: a numeric address as given (brackets around IPv6 allowed), a name resolved with
// IPv4 preferred, since "localhost" often lists ::1 first while clients use 127.0.0.1.
tcp::endpoint endpoint_of(asio::io_context& io, std::string host, std::uint16_t port) {
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  boost::system::error_code ec;
  const auto address = asio::ip::make_address(host, ec);
  if (!ec) return {address, port};
  tcp::resolver resolver(io);
  const auto found = resolver.resolve(host, std::to_string(port), ec);
  if (ec || found.empty()) {
    throw std::runtime_error(
        fmt::format("cannot resolve host '{}' to serve HTTP on; pass an IP address or a resolvable name", host));
  }
  for (const auto& entry : found) {
    if (entry.endpoint().address().is_v4()) return entry.endpoint();
  }
  return found.begin()->endpoint();
}

class Connection;

// The acceptor and what its connections share. Held by every pending handler, so it outlives the Server while the
// loop still has work of its; touched on the loop only.
class Listener : public std::enable_shared_from_this<Listener> {
 public:
  Listener(asio::io_context& io, Routes routes, ServerBounds bounds)
      : io(io), routes(std::move(routes)), bounds(bounds), acceptor_(io), retry_(io) {}

  void listen(const std::string& host, std::uint16_t port) {
    const tcp::endpoint where = endpoint_of(io, host, port);
    boost::system::error_code ec;
    acceptor_.open(where.protocol(), ec);
    if (!ec) acceptor_.set_option(asio::socket_base::reuse_address(true), ec);
    if (!ec && where.address().is_v6()) acceptor_.set_option(asio::ip::v6_only(false), ec);  // "::": every address
    if (!ec) acceptor_.bind(where, ec);
    if (!ec) acceptor_.listen(bounds.backlog, ec);
    if (ec) {
      throw std::runtime_error(
          fmt::format("cannot serve HTTP on {}:{}: {}. Is another process using the port? Pick "
                      "another one, or 0 for a free one.",
                      host, port, ec.message()));
    }
    port_ = acceptor_.local_endpoint().port();
  }

  std::uint16_t port() const { return port_; }

  void accept();
  // A connection ended (`streaming`: it had become a stream's client).
  void ended(Connection* c, bool streaming) {
    live_.erase(c);
    if (streaming) --streaming_;
    accept();  // a place is free again
  }
  // A connection became a stream's client: it no longer holds one of the request places.
  void streams(Connection*) {
    ++streaming_;
    accept();
  }
  void stop();

  asio::io_context& io;
  const Routes routes;
  const ServerBounds bounds;
  bool stopped = false;

 private:
  tcp::acceptor acceptor_;
  asio::steady_timer retry_;  // after a failed accept (out of descriptors): no busy loop
  std::unordered_map<Connection*, std::weak_ptr<Connection>> live_;
  std::size_t streaming_ = 0;  // of live_, the streams' clients
  bool accepting_ = false;
  std::uint16_t port_ = 0;
};

// One client, one request, one reply (or, for an EventStream's client, the reply's head and then its messages).
class Connection : public EventStream::Client, public std::enable_shared_from_this<Connection> {
 public:
  Connection(tcp::socket socket, std::shared_ptr<Listener> listener)
      : listener_(std::move(listener)), stream_(std::move(socket)), reply_timer_(listener_->io) {}

  void start() {
    parser_.header_limit(static_cast<std::uint32_t>(listener_->bounds.max_request_bytes));
    parser_.body_limit(listener_->bounds.max_request_bytes);
    stream_.expires_after(listener_->bounds.request_timeout);
    bhttp::async_read(stream_, buffer_, parser_,
                      [self = shared_from_this()](beast::error_code ec, std::size_t) { self->on_request(ec); });
  }

  void close() {
    if (closed_) return;
    closed_ = true;
    reply_timer_.cancel();
    beast::error_code ignored;
    stream_.socket().shutdown(tcp::socket::shutdown_both, ignored);
    stream_.close();
    listener_->ended(this, streaming_);
  }

  // A message of the stream this client follows: written now, or once the write in progress is done (only the
  // newest one waits).
  void offer(std::shared_ptr<const std::string> message) override {
    if (closed_) return;
    if (writing_) {
      next_ = std::move(message);
      return;
    }
    write_message(std::move(message));
  }

 private:
  void on_request(beast::error_code ec) {
    if (ec || listener_->stopped) return close();  // stalled, oversize, malformed or gone: this connection only
    const auto& head = parser_.get();
    if (head.method() != bhttp::verb::get) return answer({"text/plain", "only GET is served\n", 405});
    const std::string_view target = head.target();
    const auto mark = target.find('?');
    Request request{std::string(target.substr(0, mark)),
                    mark == std::string_view::npos ? std::string() : std::string(target.substr(mark + 1)),
                    std::string(head[bhttp::field::accept])};
    const auto route = listener_->routes.find(request.path);
    if (route == listener_->routes.end()) return answer({"text/plain", "not found\n", 404});
    stream_.expires_never();
    reply_timer_.expires_after(listener_->bounds.reply_timeout);
    reply_timer_.async_wait([self = shared_from_this()](const boost::system::error_code& e) {
      if (!e) self->answer({"text/plain", "no answer within the server's reply timeout\n", 503});
    });
    Respond respond = [weak = weak_from_this(), &io = listener_->io](Reply reply) {
      asio::post(io, [weak, reply = std::move(reply)]() mutable {
        if (auto self = weak.lock()) self->answer(std::move(reply));
      });
    };
    try {
      route->second(request, std::move(respond));
    } catch (const std::exception& e) {
      answer({"text/plain", std::string(e.what()) + "\n", 500});
    }
  }

  void answer(Reply reply) {
    if (answered_ || closed_ || listener_->stopped) return;
    answered_ = true;
    reply_timer_.cancel();
    if (reply.stream) {
      if (reply.stream->join(shared_from_this())) return start_stream(std::move(reply));
      reply = {"text/plain",
               fmt::format("this page has {} viewers already, its most at once: close one, or read the job with "
                           "`ctrun --status`\n",
                           reply.stream->max_clients()),
               503};
    }
    response_.result(static_cast<unsigned>(reply.status));
    for (const auto& [name, value] : reply.headers) response_.set(name, value);
    response_.version(11);
    response_.set(bhttp::field::content_type, reply.content_type);
    response_.keep_alive(false);
    response_.body() = std::move(reply.body);
    response_.prepare_payload();
    stream_.expires_after(listener_->bounds.request_timeout);
    bhttp::async_write(stream_, response_,
                       [self = shared_from_this()](beast::error_code, std::size_t) { self->close(); });
  }

  // A stream's client: the head (no length: the body ends when the connection does) with the first message, then
  // each message offered. A write that does not finish within the request timeout (a client that stopped reading)
  // closes the connection.
  void start_stream(Reply reply) {
    streaming_ = true;
    listener_->streams(this);
    std::string head = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-store\r\n";
    for (const auto& [name, value] : reply.headers) head += name + ": " + value + "\r\n";
    head += "Connection: close\r\n\r\n";
    write_message(std::make_shared<const std::string>(head + reply.body));
    watch_close();
  }

  // A stream's client sends nothing more: a read that ends is the client gone (it also keeps this connection alive
  // between messages). On the socket itself, so that the writes' deadlines are the only ones.
  void watch_close() {
    stream_.socket().async_read_some(asio::buffer(sink_), [self = shared_from_this()](beast::error_code ec, std::size_t) {
      if (ec || self->closed_) return self->close();
      self->watch_close();
    });
  }

  void write_message(std::shared_ptr<const std::string> message) {
    writing_ = true;
    stream_.expires_after(listener_->bounds.request_timeout);
    asio::async_write(stream_, asio::buffer(*message),
                      [self = shared_from_this(), message](beast::error_code ec, std::size_t) {
                        self->writing_ = false;
                        if (ec || self->listener_->stopped) return self->close();
                        if (auto next = std::move(self->next_)) self->write_message(std::move(next));
                      });
  }

  std::shared_ptr<Listener> listener_;
  beast::tcp_stream stream_;
  asio::steady_timer reply_timer_;
  beast::flat_buffer buffer_;
  bhttp::request_parser<bhttp::string_body> parser_;
  bhttp::response<bhttp::string_body> response_;
  bool answered_ = false;
  bool closed_ = false;
  bool streaming_ = false;
  bool writing_ = false;
  std::shared_ptr<const std::string> next_;  // the newest message offered while writing
  std::array<char, 512> sink_{};             // what a stream's client sends (nothing, normally)
};

void Listener::accept() {
  if (stopped || accepting_ || live_.size() - streaming_ >= static_cast<std::size_t>(std::max(bounds.connections, 1)))
    return;
  accepting_ = true;
  acceptor_.async_accept([self = shared_from_this()](const boost::system::error_code& ec, tcp::socket socket) {
    self->accepting_ = false;
    if (self->stopped) return;
    if (ec) {
      self->retry_.expires_after(std::chrono::milliseconds(100));
      self->retry_.async_wait([self](const boost::system::error_code& e) {
        if (!e) self->accept();
      });
      return;
    }
    auto connection = std::make_shared<Connection>(std::move(socket), self);
    self->live_[connection.get()] = connection;
    connection->start();
    self->accept();
  });
}

void Listener::stop() {
  stopped = true;
  boost::system::error_code ignored;
  acceptor_.close(ignored);
  retry_.cancel();
  std::vector<std::shared_ptr<Connection>> open;
  for (auto& [raw, weak] : live_) {
    if (auto c = weak.lock()) open.push_back(std::move(c));
  }
  for (auto& c : open) c->close();
}

}  // namespace

Route answer_now(std::function<Reply()> answer) {
  return answer_now([answer = std::move(answer)](const Request&) { return answer(); });
}

Route answer_now(std::function<Reply(const Request&)> answer) {
  return [answer = std::move(answer)](const Request& request, Respond respond) {
    Reply reply;
    try {
      reply = answer(request);
    } catch (const std::exception& e) {
      reply = {"text/plain", std::string(e.what()) + "\n", 500};
    }
    respond(std::move(reply));
  };
}

std::optional<std::string> Request::param(std::string_view name) const {
  std::string_view rest = query;
  while (!rest.empty()) {
    const auto amp = rest.find('&');
    const std::string_view pair = rest.substr(0, amp);
    const auto eq = pair.find('=');
    if (pair.substr(0, eq) == name) return std::string(eq == std::string_view::npos ? "" : pair.substr(eq + 1));
    if (amp == std::string_view::npos) break;
    rest.remove_prefix(amp + 1);
  }
  return std::nullopt;
}

bool Request::wants_html() const { return accept.find("text/html") != std::string::npos; }

EventStream::EventStream(int max_clients) : max_clients_(std::max(max_clients, 0)) {}
EventStream::~EventStream() = default;

bool EventStream::join(const std::shared_ptr<Client>& client) {
  if (clients() >= max_clients_) return false;
  clients_.push_back(client);
  return true;
}

int EventStream::clients() const {
  int n = 0;
  for (const auto& c : clients_) n += c.expired() ? 0 : 1;
  return n;
}

void EventStream::publish(std::string message) {
  std::erase_if(clients_, [](const auto& c) { return c.expired(); });
  if (clients_.empty()) return;
  const auto shared = std::make_shared<const std::string>(std::move(message));
  for (const auto& weak : std::vector<std::weak_ptr<Client>>(clients_)) {
    if (auto c = weak.lock()) c->offer(shared);
  }
}

struct Server::Impl {
  std::optional<asio::io_context> own_io;  // the server's own loop, when it has one
  std::shared_ptr<Listener> listener;
  std::thread thread;

  void start(asio::io_context& io, const std::string& host, std::uint16_t port, Routes routes, ServerBounds bounds) {
    listener = std::make_shared<Listener>(io, std::move(routes), bounds);
    listener->listen(host, port);
    listener->accept();
  }
};

Server::Server(asio::io_context& io, const std::string& host, std::uint16_t port, Routes routes, ServerBounds bounds)
    : impl_(std::make_unique<Impl>()) {
  impl_->start(io, host, port, std::move(routes), bounds);
}

Server::Server(const std::string& host, std::uint16_t port, Routes routes, ServerBounds bounds)
    : impl_(std::make_unique<Impl>()) {
  impl_->own_io.emplace(1);
  impl_->start(*impl_->own_io, host, port, std::move(routes), bounds);
  // Returns once every connection is closed and the acceptor's last handler ran (the destructor's stop()).
  impl_->thread = std::thread([io = &*impl_->own_io] { io->run(); });
}

Server::~Server() {
  if (!impl_->thread.joinable()) {
    impl_->listener->stop();
    return;
  }
  asio::post(*impl_->own_io, [listener = impl_->listener] { listener->stop(); });
  impl_->thread.join();
}

std::uint16_t Server::port() const { return impl_->listener->port(); }

}  // namespace ctrun::http
