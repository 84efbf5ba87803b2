#include "rendezvous/etcd/etcd_transport.hpp"

#include <openssl/ssl.h>

#include <atomic>

#include <fmt/format.h>
#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>

#include "rendezvous/etcd/etcd_error.hpp"

namespace ctrun::rdzv::etcd {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
namespace ssl = asio::ssl;
using tcp = asio::ip::tcp;
using TimePoint = store::Clock::time_point;

std::atomic<std::uint64_t> g_wire_bytes{0};

// A whole answer is one JSON document; etcd's largest (a range over every key of a run) stays far below this.
constexpr std::uint64_t kAnswerLimit = 64u << 20;

}  // namespace

std::uint64_t http_bytes_exchanged() { return g_wire_bytes.load(); }

struct TlsContext::Impl {
  ssl::context context{ssl::context::tls_client};
};

TlsContext::TlsContext(const Options& o) : impl_(std::make_unique<Impl>()) {
  auto& tls = impl_->context;
  beast::error_code ec;
  tls.set_verify_mode(ssl::verify_peer, ec);
  if (o.cacert.empty())
    tls.set_default_verify_paths(ec);
  else
    tls.load_verify_file(o.cacert, ec);
  if (ec) throw store::StoreError(fmt::format("etcd: cannot load the CA certificate '{}': {}", o.cacert, ec.message()));
  if (o.cert.empty()) return;
  tls.use_certificate_chain_file(o.cert, ec);
  if (ec)
    throw store::StoreError(fmt::format("etcd: cannot load the client certificate '{}': {}", o.cert, ec.message()));
  tls.use_private_key_file(o.key, ssl::context::pem, ec);
  if (ec) throw store::StoreError(fmt::format("etcd: cannot load the client key '{}': {}", o.key, ec.message()));
}

TlsContext::~TlsContext() = default;

struct Connection::Impl {
  asio::io_context ioc;
  std::string host;
  std::unique_ptr<beast::tcp_stream> tcp;
  std::unique_ptr<beast::ssl_stream<beast::tcp_stream>> tls;
  beast::flat_buffer buffer;

  // Runs the operations started until they complete (each is bounded by the stream's deadline).
  void run() {
    ioc.restart();
    ioc.run();
  }

  template <class F>
  void with_stream(F&& f) {
    if (tls)
      f(*tls);
    else
      f(*tcp);
  }

  void connect(const Endpoint& ep, ssl::context* tls_context, TimePoint deadline);
  void send(const std::string& target, const std::string& body, TimePoint deadline);
  // Reads what more of the answer arrived; false when the deadline passed first.
  template <class Parser>
  bool read_some(Parser& parser);
};

void Connection::Impl::connect(const Endpoint& ep, ssl::context* tls_context, TimePoint deadline) {
  host = ep.to_string();
  tcp::resolver resolver(ioc);
  beast::error_code ec;
  auto results = resolver.resolve(ep.host, std::to_string(ep.port), ec);
  if (ec) throw TransientError(fmt::format("cannot resolve {}: {}", ep.host, ec.message()));
  if (tls_context) {
    tls = std::make_unique<beast::ssl_stream<beast::tcp_stream>>(ioc, *tls_context);
    if (asio::ip::make_address(ep.host, ec); ec)  // SNI for names, not for addresses
      SSL_set_tlsext_host_name(tls->native_handle(), ep.host.c_str());
    tls->set_verify_callback(ssl::host_name_verification(ep.host));
  } else {
    tcp = std::make_unique<beast::tcp_stream>(ioc);
  }
  auto& lowest = tls ? beast::get_lowest_layer(*tls) : *tcp;
  lowest.expires_at(deadline);
  lowest.async_connect(results, [&](beast::error_code e, const tcp::endpoint&) { ec = e; });
  run();
  if (ec) throw TransientError(fmt::format("cannot connect to {}: {}", host, ec.message()));
  lowest.socket().set_option(tcp::no_delay(true), ec);
  if (!tls) return;
  tls->async_handshake(ssl::stream_base::client, [&](beast::error_code e) { ec = e; });
  run();
  // A certificate the client refuses is refused by every member, every time: say so at once.
  if (ec && ec.category() == asio::error::get_ssl_category())
    throw store::StoreError(fmt::format(
        "TLS handshake with etcd at {} failed: {} (check --rdzv-conf cacert=, cert=, key=)", host, ec.message()));
  if (ec) throw TransientError(fmt::format("TLS handshake with {} failed: {}", host, ec.message()));
}

void Connection::Impl::send(const std::string& target, const std::string& body, TimePoint deadline) {
  http::request<http::string_body> req{http::verb::post, target, 11};
  req.set(http::field::host, host);
  req.set(http::field::content_type, "application/json");
  req.keep_alive(true);
  req.body() = body;
  req.prepare_payload();
  beast::error_code ec;
  with_stream([&](auto& s) {
    beast::get_lowest_layer(s).expires_at(deadline);
    http::async_write(s, req, [&](beast::error_code e, std::size_t n) {
      ec = e;
      g_wire_bytes += n;
    });
  });
  run();
  if (ec) throw TransientError(fmt::format("sending to {} failed: {}", host, ec.message()));
}

template <class Parser>
bool Connection::Impl::read_some(Parser& parser) {
  beast::error_code ec;
  with_stream(
      [&](auto& s) { http::async_read_some(s, buffer, parser, [&](beast::error_code e, std::size_t) { ec = e; }); });
  run();
  if (ec == beast::error::timeout) return false;
  if (ec) throw TransientError(fmt::format("watch on {} failed: {}", host, ec.message()));
  return true;
}

Connection::Connection(const Endpoint& endpoint, TlsContext* tls, TimePoint deadline)
    : impl_(std::make_unique<Impl>()) {
  impl_->connect(endpoint, tls ? &tls->impl_->context : nullptr, deadline);
}

Connection::~Connection() = default;

HttpAnswer Connection::post(const std::string& target, const std::string& body, TimePoint deadline) {
  impl_->send(target, body, deadline);
  http::response_parser<http::string_body> parser;
  parser.body_limit(kAnswerLimit);
  beast::error_code ec;
  impl_->with_stream([&](auto& s) {
    http::async_read(s, impl_->buffer, parser, [&](beast::error_code e, std::size_t n) {
      ec = e;
      g_wire_bytes += n;
    });
  });
  impl_->run();
  if (ec) throw TransientError(fmt::format("reading from {} failed: {}", impl_->host, ec.message()));
  auto answer = parser.release();
  return HttpAnswer{answer.result_int(), std::move(answer.body()), answer.keep_alive()};
}

bool Connection::post_streamed(const std::string& target, const std::string& body, TimePoint deadline,
                               const std::function<bool(const std::string&)>& on_line) {
  impl_->send(target, body, deadline);
  http::response_parser<http::string_body> parser;
  parser.body_limit(boost::none);  // a watch streams for as long as it is watched
  std::string pending;
  auto on_chunk = [&](std::uint64_t, beast::string_view data, beast::error_code&) {
    pending.append(data.data(), data.size());
    g_wire_bytes += data.size();
    return data.size();
  };
  parser.on_chunk_body(on_chunk);
  beast::error_code ec;
  impl_->with_stream([&](auto& s) {
    http::async_read_header(s, impl_->buffer, parser, [&](beast::error_code e, std::size_t) { ec = e; });
  });
  impl_->run();
  if (ec == beast::error::timeout) return false;
  if (ec) throw TransientError(fmt::format("watch on {} failed: {}", impl_->host, ec.message()));
  if (parser.get().result() != http::status::ok) {
    // An error answer is not chunked: read it whole.
    impl_->with_stream([&](auto& s) {
      http::async_read(s, impl_->buffer, parser, [&](beast::error_code e, std::size_t) { ec = e; });
    });
    impl_->run();
    throw HttpErrorAnswer(parser.get().result_int(), parser.get().body());
  }
  for (;;) {
    for (auto nl = pending.find('\n'); nl != std::string::npos; nl = pending.find('\n')) {
      auto line = pending.substr(0, nl);
      pending.erase(0, nl + 1);
      if (line.find_first_not_of(" \r\t") != std::string::npos && on_line(line)) return true;
    }
    if (parser.is_done()) throw TransientError(fmt::format("{} ended the watch", impl_->host));
    if (!impl_->read_some(parser)) return false;
  }
}

}  // namespace ctrun::rdzv::etcd
