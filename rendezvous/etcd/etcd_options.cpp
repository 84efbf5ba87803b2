#include "rendezvous/etcd/etcd_options.hpp"

#include <stdexcept>
#include <string_view>

#include <fmt/format.h>

#include "common/text.hpp"

namespace ctrun::rdzv::etcd {
namespace {

// Strips "http://" or "https://" (and trailing slashes) off item; returns the scheme found, "" for none.
std::string take_scheme(std::string& item) {
  for (std::string_view prefix : {"http://", "https://"}) {
    if (text::lower(item).rfind(prefix, 0) != 0) continue;
    item.erase(0, prefix.size());
    while (!item.empty() && item.back() == '/') item.pop_back();
    return std::string(prefix.substr(0, prefix.size() - 3));
  }
  return {};
}

// The endpoints of --rdzv-endpoint, and the one scheme they name ("" when none does).
std::string parse_endpoints(const std::string& flag, std::vector<Endpoint>& endpoints) {
  if (flag.find_first_not_of(' ') == std::string::npos)
    throw std::invalid_argument(
        "--rdzv-backend etcd needs --rdzv-endpoint host:port[,host:port...] (etcd client URLs)");
  std::string scheme;
  for (auto item : text::split(flag, ',')) {
    item = text::trim(item);
    if (auto this_scheme = take_scheme(item); !this_scheme.empty()) {
      if (!scheme.empty() && scheme != this_scheme)
        throw std::invalid_argument(fmt::format("--rdzv-endpoint '{}': mixes http and https", flag));
      scheme = this_scheme;
    }
    if (item.empty())
      throw std::invalid_argument(
          fmt::format("--rdzv-endpoint '{}': empty endpoint; use host:port[,host:port...]", flag));
    endpoints.push_back(parse_endpoint(item, kDefaultPort));
    if (endpoints.back().port == 0)
      throw std::invalid_argument(fmt::format("--rdzv-endpoint '{}': port 0 is not an etcd endpoint", flag));
  }
  return scheme;
}

// --rdzv-conf protocol=, lower-cased; "" when not given.
std::string parse_protocol(const RendezvousParameters& p) {
  auto protocol = p.config.count("protocol") ? text::lower(p.config.at("protocol")) : std::string();
  if (!protocol.empty() && protocol != "http" && protocol != "https")
    throw std::invalid_argument(fmt::format("--rdzv-conf protocol='{}': use http or https", protocol));
  return protocol;
}

// Plain HTTP or TLS (protocol= or the endpoints' scheme), and TLS's files (cacert=, cert=, key=).
void parse_tls(const RendezvousParameters& p, const std::string& protocol, const std::string& scheme, Options& o) {
  if (!protocol.empty() && !scheme.empty() && protocol != scheme)
    throw std::invalid_argument(
        fmt::format("--rdzv-conf protocol={} contradicts --rdzv-endpoint '{}'", protocol, p.endpoint));
  o.https = (protocol.empty() ? scheme : protocol) == "https";
  for (auto [key, field] : {std::pair{"cacert", &o.cacert}, {"cert", &o.cert}, {"key", &o.key}}) {
    if (!p.config.count(key)) continue;
    if (!o.https) throw std::invalid_argument(fmt::format("--rdzv-conf {}= needs protocol=https", key));
    *field = p.config.at(key);
  }
  if (o.cert.empty() != o.key.empty())
    throw std::invalid_argument("--rdzv-conf cert= and key= go together (the client certificate and its key)");
}

}  // namespace

Options parse_options(const RendezvousParameters& p) {
  Options o;
  const auto protocol = parse_protocol(p);
  const auto scheme = parse_endpoints(p.endpoint, o.endpoints);
  parse_tls(p, protocol, scheme, o);
  if (auto t = p.get_as_seconds("read_timeout")) {
    if (t->count() <= 0) throw std::invalid_argument("--rdzv-conf read_timeout must be positive");
    o.request_timeout = *t;
  }
  if (auto t = p.get_as_seconds("lease_ttl")) {
    if (*t < std::chrono::seconds(2)) throw std::invalid_argument("--rdzv-conf lease_ttl must be at least 2 s");
    o.lease_ttl = std::chrono::ceil<std::chrono::seconds>(*t);
  }
  if (auto t = p.get_as_seconds("member_ttl")) {
    // etcd grants no lease shorter than 1.5 x its election timeout (2 s with the defaults) and rounds up to whole
    // seconds: a shorter TTL would be silently longer.
    if (t->count() != 0 && *t < std::chrono::seconds(2))
      throw std::invalid_argument("--rdzv-conf member_ttl must be 0 (off) or at least 2 s (etcd's shortest lease)");
    o.member_ttl = std::chrono::ceil<std::chrono::seconds>(*t);
  }
  return o;
}

}  // namespace ctrun::rdzv::etcd
