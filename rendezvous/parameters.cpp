#include "rendezvous/parameters.hpp"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <stdexcept>

#include <fmt/format.h>

#include "common/text.hpp"

namespace ctrun::rdzv {
namespace {

// An integer (text::parse_int) or a decimal, blanks around allowed.
template <typename T>
std::optional<T> parse_number(std::string_view s) {
  s = text::trim(s);
  if constexpr (std::is_integral_v<T>) {
    return text::parse_int<T>(s);
  } else {
    T value{};
    auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), value);
    if (ec != std::errc() || end != s.data() + s.size() || s.empty()) return std::nullopt;
    return value;
  }
}

int parse_node_count(std::string_view s, std::string_view whole) {
  auto n = parse_number<int>(s);
  if (!n) throw std::invalid_argument(fmt::format("--nnodes '{}': '{}' is not an integer", whole, s));
  return *n;
}

}  // namespace

std::optional<bool> RendezvousParameters::get_as_bool(const std::string& key) const {
  auto it = config.find(key);
  if (it == config.end()) return std::nullopt;
  auto v = text::lower(text::trim(it->second));
  if (v == "1" || v == "true" || v == "t" || v == "yes" || v == "y") return true;
  if (v == "0" || v == "false" || v == "f" || v == "no" || v == "n") return false;
  throw std::invalid_argument(
      fmt::format("--rdzv-conf {}='{}' is not a boolean (use 1/true/yes or 0/false/no)", key, it->second));
}

std::optional<long> RendezvousParameters::get_as_int(const std::string& key) const {
  auto it = config.find(key);
  if (it == config.end()) return std::nullopt;
  auto v = parse_number<long>(it->second);
  if (!v) throw std::invalid_argument(fmt::format("--rdzv-conf {}='{}' is not an integer", key, it->second));
  return v;
}

std::optional<store::Duration> RendezvousParameters::get_as_seconds(const std::string& key) const {
  auto it = config.find(key);
  if (it == config.end()) return std::nullopt;
  auto v = parse_number<double>(it->second);
  if (!v || !std::isfinite(*v) || *v < 0 || *v > 1e9)
    throw std::invalid_argument(
        fmt::format("--rdzv-conf {}='{}' is not a duration in seconds (e.g. 30 or 0.5)", key, it->second));
  return store::Duration(static_cast<std::int64_t>(std::llround(*v * 1000.0)));
}

std::string Endpoint::to_string() const {
  if (host.find(':') != std::string::npos) return fmt::format("[{}]:{}", host, port);
  return fmt::format("{}:{}", host, port);
}

std::pair<int, int> parse_nnodes(std::string_view value) {
  auto colon = value.find(':');
  int min = 0, max = 0;
  if (colon == std::string_view::npos) {
    min = max = parse_node_count(value, value);
  } else {
    if (value.find(':', colon + 1) != std::string_view::npos)
      throw std::invalid_argument(fmt::format("--nnodes '{}': use N or MIN:MAX", value));
    min = parse_node_count(value.substr(0, colon), value);
    max = parse_node_count(value.substr(colon + 1), value);
  }
  if (min <= 0 || min > max) throw std::invalid_argument(fmt::format("--nnodes '{}': need 0 < MIN <= MAX", value));
  return {min, max};
}

Endpoint parse_endpoint(std::string_view value, std::uint16_t default_port) {
  value = text::trim(value);
  if (value.empty()) throw std::invalid_argument("--rdzv-endpoint is empty; use host[:port]");
  Endpoint ep;
  std::string_view port_part;
  if (value.front() == '[') {  // [IPv6]:port
    auto close = value.find(']');
    if (close == std::string_view::npos)
      throw std::invalid_argument(fmt::format("--rdzv-endpoint '{}': missing ']' after the IPv6 address", value));
    ep.host = std::string(value.substr(1, close - 1));
    auto rest = value.substr(close + 1);
    if (!rest.empty()) {
      if (rest.front() != ':')
        throw std::invalid_argument(fmt::format("--rdzv-endpoint '{}': expected ':port' after ']'", value));
      port_part = rest.substr(1);
    }
  } else if (std::count(value.begin(), value.end(), ':') > 1) {  // bare IPv6 address, no port
    ep.host = std::string(value);
  } else {
    auto colon = value.find(':');
    ep.host = std::string(value.substr(0, colon));
    if (colon != std::string_view::npos) port_part = value.substr(colon + 1);
  }
  if (ep.host.empty()) throw std::invalid_argument(fmt::format("--rdzv-endpoint '{}': the host is empty", value));
  ep.port = default_port;
  if (!port_part.empty()) {
    auto port = parse_number<int>(port_part);
    if (!port || *port < 0 || *port > 65535)
      throw std::invalid_argument(fmt::format("--rdzv-endpoint '{}': '{}' is not a port (0-65535)", value, port_part));
    ep.port = static_cast<std::uint16_t>(*port);
  }
  return ep;
}

Endpoint static_endpoint(const RendezvousParameters& params) {
  if (params.endpoint.empty()) return Endpoint{params.master_addr, params.master_port};
  return parse_endpoint(params.endpoint, params.master_port);
}

// torchrun's _parse_rendezvous_config: split on ',', then on the first '='; empty key or value is an error.
std::map<std::string, std::string> parse_rdzv_conf(std::string_view value) {
  std::map<std::string, std::string> out;
  if (text::trim(value).empty()) return out;
  std::size_t start = 0;
  while (start <= value.size()) {
    auto comma = value.find(',', start);
    auto item = value.substr(start, comma == std::string_view::npos ? std::string_view::npos : comma - start);
    auto eq = item.find('=');
    if (eq == std::string_view::npos)
      throw std::invalid_argument(fmt::format("--rdzv-conf '{}': '{}' is not key=value", value, item));
    auto key = text::trim(item.substr(0, eq));
    auto val = text::trim(item.substr(eq + 1));
    if (key.empty()) throw std::invalid_argument(fmt::format("--rdzv-conf '{}': empty key in '{}'", value, item));
    if (val.empty()) throw std::invalid_argument(fmt::format("--rdzv-conf '{}': empty value for '{}'", value, key));
    out[std::string(key)] = std::string(val);
    if (comma == std::string_view::npos) break;
    start = comma + 1;
  }
  return out;
}

C10dSettings c10d_settings(const RendezvousParameters& p) {
  C10dSettings s;
  auto positive = [](const char* key, store::Duration d) {
    if (d.count() <= 0) throw std::invalid_argument(fmt::format("--rdzv-conf {} must be positive", key));
    return d;
  };
  if (auto v = p.get_as_seconds("join_timeout")) s.join_timeout = positive("join_timeout", *v);
  if (auto v = p.get_as_seconds("last_call_timeout")) s.last_call_timeout = *v;
  if (auto v = p.get_as_seconds("close_timeout")) s.close_timeout = positive("close_timeout", *v);
  if (auto v = p.get_as_seconds("keep_alive_interval")) s.keep_alive_interval = positive("keep_alive_interval", *v);
  if (auto v = p.get_as_int("keep_alive_max_attempt")) {
    if (*v < 1) throw std::invalid_argument("--rdzv-conf keep_alive_max_attempt must be >= 1");
    s.keep_alive_max_attempt = static_cast<int>(*v);
  }
  if (auto v = p.get_as_seconds("read_timeout")) s.read_timeout = positive("read_timeout", *v);
  s.is_host = p.get_as_bool("is_host");
  return s;
}

}  // namespace ctrun::rdzv
