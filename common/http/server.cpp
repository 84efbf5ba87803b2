#include "common/http/server.hpp"

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
  void ended(Connection* c) {
    live_.erase(c);
    accept();  // a place is free again
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
  bool accepting_ = false;
  std::uint16_t port_ = 0;
};

// One client, one request, one reply.
class Connection : public std::enable_shared_from_this<Connection> {
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
    listener_->ended(this);
  }

 private:
  void on_request(beast::error_code ec) {
    if (ec || listener_->stopped) return close();  // stalled, oversize, malformed or gone: this connection only
    const auto& request = parser_.get();
    if (request.method() != bhttp::verb::get) return answer({"text/plain", "only GET is served\n", 405});
    const std::string_view target = request.target();
    const auto route = listener_->routes.find(std::string(target.substr(0, target.find('?'))));
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
      route->second(std::move(respond));
    } catch (const std::exception& e) {
      answer({"text/plain", std::string(e.what()) + "\n", 500});
    }
  }

  void answer(Reply reply) {
    if (answered_ || closed_ || listener_->stopped) return;
    answered_ = true;
    reply_timer_.cancel();
    response_.result(static_cast<unsigned>(reply.status));
    response_.version(11);
    response_.set(bhttp::field::content_type, reply.content_type);
    response_.keep_alive(false);
    response_.body() = std::move(reply.body);
    response_.prepare_payload();
    stream_.expires_after(listener_->bounds.request_timeout);
    bhttp::async_write(stream_, response_,
                       [self = shared_from_this()](beast::error_code, std::size_t) { self->close(); });
  }

  std::shared_ptr<Listener> listener_;
  beast::tcp_stream stream_;
  asio::steady_timer reply_timer_;
  beast::flat_buffer buffer_;
  bhttp::request_parser<bhttp::string_body> parser_;
  bhttp::response<bhttp::string_body> response_;
  bool answered_ = false;
  bool closed_ = false;
};

void Listener::accept() {
  if (stopped || accepting_ || live_.size() >= static_cast<std::size_t>(std::max(bounds.connections, 1))) return;
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
  return [answer = std::move(answer)](Respond respond) {
    Reply reply;
    try {
      reply = answer();
    } catch (const std::exception& e) {
      reply = {"text/plain", std::string(e.what()) + "\n", 500};
    }
    respond(std::move(reply));
  };
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
