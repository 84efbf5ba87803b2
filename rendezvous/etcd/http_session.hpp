#pragma once
// One HTTP/1.1 connection to an etcd member over any Beast stream, every step bounded by a deadline: the code both
// halves of the transport share. Plain TCP is instantiated in etcd_transport.cpp (part of every ctrun); TLS in
// tls_module.cpp, a module ctrun loads only when a job asks for https (tls_loader.hpp), so that OpenSSL is not
// mapped into every launch.

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include <fmt/format.h>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include "rendezvous/etcd/etcd_error.hpp"
#include "rendezvous/etcd/etcd_options.hpp"
#include "rendezvous/etcd/session.hpp"

namespace ctrun::rdzv::etcd {

// A whole answer is one JSON document; etcd's largest (a range over every key of a run) stays far below this.
inline constexpr std::uint64_t kAnswerLimit = 64u << 20;

// Stream: beast::tcp_stream or beast::ssl_stream<beast::tcp_stream>, already connected (and shaken hands) on ioc.
template <class Stream>
class HttpSession final : public Session {
 public:
  HttpSession(std::unique_ptr<boost::asio::io_context> ioc, std::unique_ptr<Stream> stream, std::string host,
              std::atomic<std::uint64_t>* wire_bytes)
      : ioc_(std::move(ioc)), stream_(std::move(stream)), host_(std::move(host)), wire_bytes_(wire_bytes) {}

  HttpAnswer post(const std::string& target, const std::string& body, store::Clock::time_point deadline) override {
    namespace http = boost::beast::http;
    send(target, body, deadline);
    http::response_parser<http::string_body> parser;
    parser.body_limit(kAnswerLimit);
    boost::beast::error_code ec;
    http::async_read(*stream_, buffer_, parser, [&](boost::beast::error_code e, std::size_t n) {
      ec = e;
      *wire_bytes_ += n;
    });
    run(*ioc_);
    if (ec) throw TransientError(fmt::format("reading from {} failed: {}", host_, ec.message()));
    auto answer = parser.release();
    return HttpAnswer{answer.result_int(), std::move(answer.body()), answer.keep_alive()};
  }

  bool post_streamed(const std::string& target, const std::string& body, store::Clock::time_point deadline,
                     const std::function<bool(const std::string&)>& on_line) override {
    namespace beast = boost::beast;
    namespace http = beast::http;
    send(target, body, deadline);
    http::response_parser<http::string_body> parser;
    parser.body_limit(boost::none);  // a watch streams for as long as it is watched
    std::string pending;
    auto on_chunk = [&](std::uint64_t, beast::string_view data, beast::error_code&) {
      pending.append(data.data(), data.size());
      *wire_bytes_ += data.size();
      return data.size();
    };
    parser.on_chunk_body(on_chunk);
    beast::error_code ec;
    http::async_read_header(*stream_, buffer_, parser, [&](beast::error_code e, std::size_t) { ec = e; });
    run(*ioc_);
    if (ec == beast::error::timeout) return false;
    if (ec) throw TransientError(fmt::format("watch on {} failed: {}", host_, ec.message()));
    if (parser.get().result() != http::status::ok) {
      // An error answer is not chunked: read it whole.
      http::async_read(*stream_, buffer_, parser, [&](beast::error_code e, std::size_t) { ec = e; });
      run(*ioc_);
      throw HttpErrorAnswer(parser.get().result_int(), parser.get().body());
    }
    for (;;) {
      for (auto nl = pending.find('\n'); nl != std::string::npos; nl = pending.find('\n')) {
        auto line = pending.substr(0, nl);
        pending.erase(0, nl + 1);
        if (line.find_first_not_of(" \r\t") != std::string::npos && on_line(line)) return true;
      }
      if (parser.is_done()) throw TransientError(fmt::format("{} ended the watch", host_));
      http::async_read_some(*stream_, buffer_, parser, [&](beast::error_code e, std::size_t) { ec = e; });
      run(*ioc_);
      if (ec == beast::error::timeout) return false;
      if (ec) throw TransientError(fmt::format("watch on {} failed: {}", host_, ec.message()));
    }
  }

  // Runs the operations started until they complete (each is bounded by the stream's deadline).
  static void run(boost::asio::io_context& ioc) {
    ioc.restart();
    ioc.run();
  }

 private:
  void send(const std::string& target, const std::string& body, store::Clock::time_point deadline) {
    namespace http = boost::beast::http;
    http::request<http::string_body> req{http::verb::post, target, 11};
    req.set(http::field::host, host_);
    req.set(http::field::content_type, "application/json");
    req.keep_alive(true);
    req.body() = body;
    req.prepare_payload();
    boost::beast::error_code ec;
    boost::beast::get_lowest_layer(*stream_).expires_at(deadline);
    http::async_write(*stream_, req, [&](boost::beast::error_code e, std::size_t n) {
      ec = e;
      *wire_bytes_ += n;
    });
    run(*ioc_);
    if (ec) throw TransientError(fmt::format("sending to {} failed: {}", host_, ec.message()));
  }

  std::unique_ptr<boost::asio::io_context> ioc_;  // declared first: the stream is destroyed before its context
  std::unique_ptr<Stream> stream_;
  std::string host_;
  std::atomic<std::uint64_t>* wire_bytes_;
  boost::beast::flat_buffer buffer_;
};

// Resolves the member's name and connects the lowest layer of `stream` by `deadline` (TransientError otherwise).
// `host`: the endpoint as messages name it (Endpoint::to_string()).
template <class Stream>
void connect_lowest_layer(boost::asio::io_context& ioc, Stream& stream, const Endpoint& ep, const std::string& host,
                          store::Clock::time_point deadline) {
  namespace beast = boost::beast;
  using tcp = boost::asio::ip::tcp;
  tcp::resolver resolver(ioc);
  beast::error_code ec;
  auto results = resolver.resolve(ep.host, std::to_string(ep.port), ec);
  if (ec) throw TransientError(fmt::format("cannot resolve {}: {}", ep.host, ec.message()));
  auto& lowest = beast::get_lowest_layer(stream);
  lowest.expires_at(deadline);
  lowest.async_connect(results, [&](beast::error_code e, const tcp::endpoint&) { ec = e; });
  HttpSession<Stream>::run(ioc);
  if (ec) throw TransientError(fmt::format("cannot connect to {}: {}", host, ec.message()));
  lowest.socket().set_option(tcp::no_delay(true), ec);
}

}  // namespace ctrun::rdzv::etcd
