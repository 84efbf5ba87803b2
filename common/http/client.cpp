#include "common/http/client.hpp"

#include <chrono>
#include <stdexcept>

#include <fmt/format.h>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

namespace ctrun::http {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace bhttp = beast::http;
using tcp = asio::ip::tcp;

constexpr std::size_t kMaxBody = 64 << 20;  // the live view of the largest job is far smaller

}  // namespace

std::string get(const std::string& host, int port, const std::string& path, int timeout_ms) {
  const std::string where = fmt::format("{}:{}", host.find(':') != std::string::npos ? "[" + host + "]" : host, port);
  const std::string url = fmt::format("http://{}{}", where, path);
  auto failed = [&](const std::string& why) { return std::runtime_error(fmt::format("GET {} failed: {}", url, why)); };

  asio::io_context io(1);
  boost::system::error_code ec;
  const auto endpoints = tcp::resolver(io).resolve(host, std::to_string(port), ec);
  if (ec) throw failed("cannot resolve '" + host + "': " + ec.message());
  // Asynchronous steps on a loop of this call's own: the stream's deadline bounds connect, write and read together.
  beast::tcp_stream stream(io);
  stream.expires_after(std::chrono::milliseconds(timeout_ms));
  bhttp::request<bhttp::empty_body> request{bhttp::verb::get, path, 11};
  request.set(bhttp::field::host, where);
  request.set(bhttp::field::user_agent, "ctrun");
  request.keep_alive(false);
  beast::flat_buffer buffer;
  bhttp::response_parser<bhttp::string_body> parser;
  parser.body_limit(kMaxBody);
  beast::error_code result;
  stream.async_connect(endpoints, [&](beast::error_code e, const tcp::endpoint&) {
    if (e) return void(result = e);
    bhttp::async_write(stream, request, [&](beast::error_code e2, std::size_t) {
      if (e2) return void(result = e2);
      bhttp::async_read(stream, buffer, parser, [&](beast::error_code e3, std::size_t) { result = e3; });
    });
  });
  io.run();
  if (result == beast::error::timeout) throw failed(fmt::format("no reply within {} ms", timeout_ms));
  if (result) throw failed(result.message());
  const auto& response = parser.get();
  if (response.result() != bhttp::status::ok) {
    const std::string& body = response.body();
    throw std::runtime_error(fmt::format("{} answered {} to GET {}: {}", where, response.result_int(), path,
                                         body.substr(0, body.find('\n'))));
  }
  return response.body();
}

}  // namespace ctrun::http
