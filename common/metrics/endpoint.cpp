#include "common/metrics/endpoint.hpp"

#include <arpa/inet.h>

#include <fmt/format.h>

#include "common/http/server.hpp"
#include "common/log.hpp"
#include "common/metrics/text_format.hpp"

namespace ctrun::metrics {
namespace {

bool is_v6_literal(std::string host) {
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  in6_addr a{};
  return ::inet_pton(AF_INET6, host.c_str(), &a) == 1;
}

std::string bracketed(const std::string& host) {
  return is_v6_literal(host) && host.front() != '[' ? "[" + host + "]" : host;
}

}  // namespace

struct Endpoint::Impl {
  std::string host;
  std::unique_ptr<http::Server> server;
};

Endpoint::Endpoint(EndpointOptions o, std::function<Families()> collect) : impl_(std::make_unique<Impl>()) {
  impl_->host = o.host;
  auto scrape = [collect = std::move(collect)] {
    Families families;
    try {
      families = collect();
    } catch (const std::exception& e) {
      // A scrape must not take the program down; the scraper sees an empty page.
      log::get("metrics")->warn("collecting metrics failed: {}", e.what());
    }
    return http::Reply{kTextContentType, to_text(families)};
  };
  http::Routes routes{{"/metrics", http::answer_now(std::move(scrape))}};
  if (o.healthz) {
    routes["/healthz"] = http::answer_now([healthz = o.healthz] {
      auto [status, body] = healthz();
      return http::Reply{"text/plain; charset=utf-8", std::move(body), status};
    });
  }
  impl_->server = std::make_unique<http::Server>(
      o.host, o.port, std::move(routes),
      http::ServerBounds{o.connections, o.backlog, o.max_request_bytes, o.request_timeout, o.request_timeout});
}

Endpoint::~Endpoint() = default;

std::uint16_t Endpoint::port() const { return impl_->server->port(); }

std::string Endpoint::url() const {
  return fmt::format("http://{}:{}/metrics", bracketed(impl_->host), impl_->server->port());
}

}  // namespace ctrun::metrics
