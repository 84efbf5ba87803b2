#include "common/http/server.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <future>
#include <stdexcept>

#include <fmt/format.h>

#if CTRUN_WITH_METRICS
#include <CivetServer.h>
#endif

namespace ctrun::http {

std::vector<std::string> civetweb_options(const std::string& host, std::uint16_t port, const ServerBounds& b) {
  return {"listening_ports",    fmt::format("{}:{}", host, port),
          "num_threads",        std::to_string(b.threads),
          "connection_queue",   std::to_string(b.queued),
          "listen_backlog",     std::to_string(b.backlog),
          "max_request_size",   std::to_string(b.max_request_bytes),
          "request_timeout_ms", std::to_string(b.request_timeout.count()),
          "enable_keep_alive",  "no"};
}

void stop_promptly(const std::function<void()>& stop, const std::string& host, std::uint16_t port) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  const bool reachable =
      port != 0 && ::inet_pton(AF_INET, host == "0.0.0.0" ? "127.0.0.1" : host.c_str(), &a.sin_addr) == 1;
  auto stopped = std::async(std::launch::async, stop);
  // Each poke is a connection closed at once: if it is accepted before the stop flag is seen, the worker that
  // takes it reads end-of-file and is free again. Bounded: the stop's own worst case is 2 s, this gives it 5 s.
  for (int i = 0; reachable && i < 500 && stopped.wait_for(std::chrono::milliseconds(10)) != std::future_status::ready;
       ++i) {
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) break;
    (void)::connect(fd, reinterpret_cast<const sockaddr*>(&a), sizeof a);
    ::close(fd);
  }
  stopped.get();
}

#if CTRUN_WITH_METRICS

namespace {

// One handler per route: civetweb also hands a handler "PATH/anything", which is answered 404 here.
class RouteHandler final : public CivetHandler {
 public:
  RouteHandler(std::string path, std::function<Reply()> answer) : path_(std::move(path)), answer_(std::move(answer)) {}

  bool handleGet(CivetServer*, mg_connection* conn) override {
    const mg_request_info* request = mg_get_request_info(conn);
    if (request == nullptr || request->local_uri == nullptr || path_ != request->local_uri) {
      mg_send_http_error(conn, 404, "%s", "not found");
      return true;
    }
    Reply reply;
    try {
      reply = answer_();
    } catch (const std::exception& e) {
      mg_send_http_error(conn, 500, "%s", e.what());
      return true;
    }
    mg_send_http_ok(conn, reply.content_type.c_str(), static_cast<long long>(reply.body.size()));
    mg_write(conn, reply.body.data(), reply.body.size());
    return true;
  }

 private:
  std::string path_;
  std::function<Reply()> answer_;
};

}  // namespace

struct Server::Impl {
  std::vector<std::unique_ptr<RouteHandler>> handlers;  // outlive the server (declared first, destroyed last)
  std::unique_ptr<CivetServer> server;
  std::string host;
  std::uint16_t port = 0;
};

Server::Server(const std::string& host, std::uint16_t port, Routes routes, ServerBounds bounds)
    : impl_(std::make_unique<Impl>()) {
  impl_->host = host;
  try {
    impl_->server = std::make_unique<CivetServer>(civetweb_options(host, port, bounds));
  } catch (const std::exception& e) {
    throw std::runtime_error(fmt::format("cannot serve HTTP on {}:{}: {}", host, port, e.what()));
  }
  for (auto& [path, answer] : routes) {
    impl_->handlers.push_back(std::make_unique<RouteHandler>(path, std::move(answer)));
    impl_->server->addHandler(path, impl_->handlers.back().get());
  }
  const auto ports = impl_->server->getListeningPorts();
  if (ports.empty()) throw std::runtime_error("HTTP server: civetweb reports no listening port");
  impl_->port = static_cast<std::uint16_t>(ports.front());
}

Server::~Server() {
  // Threads stop before the handlers go.
  if (impl_ && impl_->server) stop_promptly([this] { impl_->server->close(); }, impl_->host, impl_->port);
}

std::uint16_t Server::port() const { return impl_->port; }

bool available() { return true; }

#else

struct Server::Impl {};

Server::Server(const std::string&, std::uint16_t, Routes, ServerBounds) {
  throw std::runtime_error(
      "this build has no HTTP server: it was configured with -DCTRUN_WITH_METRICS=OFF (install prometheus-cpp-dev, "
      "which brings civetweb and libcurl, and configure again)");
}

Server::~Server() = default;
std::uint16_t Server::port() const { return 0; }
bool available() { return false; }

#endif

}  // namespace ctrun::http
