#include "common/metrics/endpoint.hpp"

#include <arpa/inet.h>
#include <netdb.h>
#include <sys/socket.h>

#include <stdexcept>

#include <fmt/format.h>

#include "common/http/server.hpp"
#include "common/log.hpp"

#if CTRUN_WITH_METRICS
#include <prometheus/collectable.h>
#include <prometheus/exposer.h>
#include <prometheus/metric_family.h>
#endif

namespace ctrun::metrics {
namespace {

bool is_v6_literal(const std::string& host) {
  in6_addr a{};
  return ::inet_pton(AF_INET6, host.c_str(), &a) == 1;
}

std::string bracketed(const std::string& host) { return is_v6_literal(host) ? "[" + host + "]" : host; }

#if CTRUN_WITH_METRICS
// civetweb wants a numeric address: a host name is resolved as the store resolves it (IPv4 preferred, since
// "localhost" often lists ::1 first while clients use 127.0.0.1).
std::string numeric_host(const std::string& given) {
  std::string host = given;
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  in_addr a4{};
  if (::inet_pton(AF_INET, host.c_str(), &a4) == 1 || is_v6_literal(host)) return host;
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  if (::getaddrinfo(host.c_str(), nullptr, &hints, &res) != 0 || res == nullptr)
    throw std::runtime_error(
        fmt::format("metrics endpoint: cannot resolve host '{}'; pass an IP address or a resolvable name", given));
  std::string out;
  for (const addrinfo* r = res; r != nullptr; r = r->ai_next) {
    char buf[INET6_ADDRSTRLEN] = {};
    const void* addr = r->ai_family == AF_INET
                           ? static_cast<const void*>(&reinterpret_cast<sockaddr_in*>(r->ai_addr)->sin_addr)
                           : static_cast<const void*>(&reinterpret_cast<sockaddr_in6*>(r->ai_addr)->sin6_addr);
    if (::inet_ntop(r->ai_family, addr, buf, sizeof buf) == nullptr) continue;
    if (out.empty() || r->ai_family == AF_INET) out = buf;
    if (r->ai_family == AF_INET) break;
  }
  ::freeaddrinfo(res);
  if (out.empty()) throw std::runtime_error(fmt::format("metrics endpoint: no address for host '{}'", given));
  return out;
}

// Debian's civetweb is built without IPv6 (mg_check_feature(8) is 0): "::" (every address, as the store serves it)
// becomes every IPv4 address; another IPv6 address fails to bind.
#endif

}  // namespace

#if CTRUN_WITH_METRICS

namespace {

class Collector final : public prometheus::Collectable {
 public:
  explicit Collector(std::function<Families()> collect) : collect_(std::move(collect)) {}

  std::vector<prometheus::MetricFamily> Collect() const override {
    Families families;
    try {
      families = collect_();
    } catch (const std::exception& e) {
      // A scrape must not take the program down; the scraper sees the endpoint's own metrics only.
      log::get("metrics")->warn("collecting metrics failed: {}", e.what());
    }
    std::vector<prometheus::MetricFamily> out;
    out.reserve(families.size());
    for (auto& f : families) {
      prometheus::MetricFamily pf;
      pf.name = std::move(f.name);
      pf.help = std::move(f.help);
      pf.type = f.type == Type::kCounter ? prometheus::MetricType::Counter : prometheus::MetricType::Gauge;
      for (auto& s : f.samples) {
        prometheus::ClientMetric m;
        for (auto& [k, v] : s.labels) m.label.push_back({std::move(k), std::move(v)});
        (f.type == Type::kCounter ? m.counter.value : m.gauge.value) = s.value;
        pf.metric.push_back(std::move(m));
      }
      out.push_back(std::move(pf));
    }
    return out;
  }

 private:
  std::function<Families()> collect_;
};

}  // namespace

struct Endpoint::Impl {
  std::string host;
  std::shared_ptr<Collector> collector;
  std::unique_ptr<prometheus::Exposer> exposer;
  std::uint16_t port = 0;
};

Endpoint::Endpoint(EndpointOptions o, std::function<Families()> collect) : impl_(std::make_unique<Impl>()) {
  impl_->host = numeric_host(o.host);
  if (impl_->host == "::") impl_->host = "0.0.0.0";  // Debian's civetweb has no IPv6: every IPv4 address
  // civetweb's own bounds (see the header), set as for every civetweb server of ctrun (common/http).
  std::vector<std::string> options = http::civetweb_options(
      bracketed(impl_->host), o.port,
      http::ServerBounds{o.threads, o.queued, o.backlog, o.max_request_bytes, o.request_timeout});
  try {
    impl_->exposer = std::make_unique<prometheus::Exposer>(std::move(options));
  } catch (const std::exception& e) {
    throw std::runtime_error(fmt::format(
        "cannot serve metrics on {}:{}: {}. {}", bracketed(impl_->host), o.port, e.what(),
        is_v6_literal(impl_->host)
            ? "The metrics endpoint serves IPv4 only (Debian's civetweb has no IPv6): bind an IPv4 address, or '::' "
              "for every IPv4 address."
            : "Is another process using the port? Pick another --metrics-port, or 0 for a free one."));
  }
  const auto ports = impl_->exposer->GetListeningPorts();
  if (ports.empty()) throw std::runtime_error("metrics endpoint: civetweb reports no listening port");
  impl_->port = static_cast<std::uint16_t>(ports.front());
  impl_->collector = std::make_shared<Collector>(std::move(collect));
  impl_->exposer->RegisterCollectable(impl_->collector);
}

Endpoint::~Endpoint() {
  // The Exposer first: its threads stop (a scrape in progress ends) before the collector and its owner go.
  if (impl_ && impl_->exposer) http::stop_promptly([this] { impl_->exposer.reset(); }, impl_->host, impl_->port);
}

std::uint16_t Endpoint::port() const { return impl_->port; }

bool available() { return true; }

#else

struct Endpoint::Impl {
  std::string host;
  std::uint16_t port = 0;
};

Endpoint::Endpoint(EndpointOptions, std::function<Families()>) {
  throw std::runtime_error(
      "this build serves no metrics: it was configured with -DCTRUN_WITH_METRICS=OFF (install prometheus-cpp-dev and "
      "configure again to use --metrics-port)");
}

Endpoint::~Endpoint() = default;
std::uint16_t Endpoint::port() const { return 0; }
bool available() { return false; }

#endif

std::string Endpoint::url() const { return fmt::format("http://{}:{}/metrics", bracketed(impl_->host), impl_->port); }

}  // namespace ctrun::metrics
