#include "rendezvous/etcd/etcd_client.hpp"

#include <openssl/ssl.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <mutex>
#include <random>
#include <thread>

#include <fmt/format.h>
#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/core/detail/base64.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>
#include <nlohmann/json.hpp>

#include "common/log.hpp"

namespace ctrun::rdzv::etcd {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
namespace ssl = asio::ssl;
using tcp = asio::ip::tcp;
using json = nlohmann::json;
using TimePoint = store::Clock::time_point;

std::atomic<std::uint64_t> g_wire_bytes{0};

// A failure worth retrying on another endpoint (transport, no leader, etcd's own timeouts).
struct Transient : std::runtime_error {
  using std::runtime_error::runtime_error;
};

std::string b64(const std::string& s) {
  std::string out(beast::detail::base64::encoded_size(s.size()), '\0');
  out.resize(beast::detail::base64::encode(out.data(), s.data(), s.size()));
  return out;
}

std::string unb64(const std::string& s) {
  std::string out(beast::detail::base64::decoded_size(s.size()), '\0');
  out.resize(beast::detail::base64::decode(out.data(), s.data(), s.size()).first);
  return out;
}

// The gateway writes int64 fields as strings and leaves out zero values.
std::int64_t i64(const json& j, const char* field) {
  auto it = j.find(field);
  if (it == j.end() || it->is_null()) return 0;
  if (it->is_string()) return std::stoll(it->get<std::string>());
  return it->get<std::int64_t>();
}

RangeResult to_range(const json& j) {
  RangeResult r;
  r.revision = j.contains("header") ? i64(j["header"], "revision") : 0;
  r.count = i64(j, "count");
  if (auto it = j.find("kvs"); it != j.end())
    for (const auto& kv : *it)
      r.kvs.push_back(KeyValue{unb64(kv.value("key", "")), unb64(kv.value("value", "")), i64(kv, "create_revision"),
                               i64(kv, "mod_revision"), i64(kv, "version"), i64(kv, "lease")});
  return r;
}

json op_json(const Op& op) {
  switch (op.kind) {
    case Op::Kind::kPut: {
      json put{{"key", b64(op.key)}, {"value", b64(op.value)}};
      if (op.lease) put["lease"] = std::to_string(op.lease);
      if (op.prev_kv) put["prev_kv"] = true;
      return json{{"request_put", put}};
    }
    case Op::Kind::kRange: {
      json range{{"key", b64(op.key)}};
      if (!op.range_end.empty()) range["range_end"] = b64(op.range_end);
      if (op.keys_only) range["keys_only"] = true;
      return json{{"request_range", range}};
    }
    case Op::Kind::kDelete: {
      json del{{"key", b64(op.key)}};
      if (!op.range_end.empty()) del["range_end"] = b64(op.range_end);
      return json{{"request_delete_range", del}};
    }
  }
  return {};
}

json compare_json(const Compare& c) {
  json j{{"key", b64(c.key)}, {"result", "EQUAL"}};
  switch (c.target) {
    case Compare::Target::kCreate:
      j["target"] = "CREATE";
      j["create_revision"] = std::to_string(c.revision);
      break;
    case Compare::Target::kMod:
      j["target"] = "MOD";
      j["mod_revision"] = std::to_string(c.revision);
      break;
    case Compare::Target::kValue:
      j["target"] = "VALUE";
      j["value"] = b64(c.value);
      break;
  }
  return j;
}

// etcd's gRPC codes that say the request itself is wrong; every other error may pass on another member or later.
bool permanent(int code) {
  return code == 3 || code == 5 || code == 6 || code == 7 || code == 9 || code == 11 || code == 16;
}

[[noreturn]] void throw_error_body(unsigned status, const std::string& body) {
  json j = json::parse(body, nullptr, false);
  int code = j.is_object() ? j.value("code", 0) : 0;
  std::string message = j.is_object() ? j.value("message", j.value("error", body)) : body;
  if (code && permanent(code)) throw EtcdError(code, message);
  throw Transient(fmt::format("HTTP {}: {}", status, message));
}

// One connection to one endpoint: plain TCP or TLS, every operation bounded by a deadline.
class Connection {
 public:
  Connection(asio::io_context& ioc, ssl::context* tls) : ioc_(ioc), tls_ctx_(tls) {}

  void open(const Endpoint& ep, TimePoint deadline) {
    host_ = ep.to_string();
    tcp::resolver resolver(ioc_);
    beast::error_code ec;
    auto results = resolver.resolve(ep.host, std::to_string(ep.port), ec);
    if (ec) throw Transient(fmt::format("cannot resolve {}: {}", ep.host, ec.message()));
    if (tls_ctx_) {
      tls_ = std::make_unique<beast::ssl_stream<beast::tcp_stream>>(ioc_, *tls_ctx_);
      if (asio::ip::make_address(ep.host, ec); ec)  // SNI for names, not for addresses
        SSL_set_tlsext_host_name(tls_->native_handle(), ep.host.c_str());
      tls_->set_verify_callback(ssl::host_name_verification(ep.host));
    } else {
      tcp_ = std::make_unique<beast::tcp_stream>(ioc_);
    }
    auto& lowest = tls_ ? beast::get_lowest_layer(*tls_) : *tcp_;
    lowest.expires_at(deadline);
    lowest.async_connect(results, [&](beast::error_code e, const tcp::endpoint&) { ec = e; });
    run();
    if (ec) throw Transient(fmt::format("cannot connect to {}: {}", host_, ec.message()));
    lowest.socket().set_option(tcp::no_delay(true), ec);
    if (tls_) {
      tls_->async_handshake(ssl::stream_base::client, [&](beast::error_code e) { ec = e; });
      run();
      // A certificate the client refuses is refused by every member, every time: say so at once.
      if (ec && ec.category() == asio::error::get_ssl_category())
        throw store::StoreError(
            fmt::format("TLS handshake with etcd at {} failed: {} (check --rdzv-conf cacert=, "
                        "cert=, key=)",
                        host_, ec.message()));
      if (ec) throw Transient(fmt::format("TLS handshake with {} failed: {}", host_, ec.message()));
    }
  }

  bool is_open() const { return tcp_ || tls_; }

  template <class F>
  auto with_stream(F&& f) {
    return tls_ ? f(*tls_) : f(*tcp_);
  }

  void send(const std::string& target, const std::string& body, TimePoint deadline) {
    http::request<http::string_body> req{http::verb::post, target, 11};
    req.set(http::field::host, host_);
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
      return 0;
    });
    run();
    if (ec) throw Transient(fmt::format("sending to {} failed: {}", host_, ec.message()));
  }

  http::response<http::string_body> exchange(const std::string& target, const std::string& body, TimePoint deadline) {
    send(target, body, deadline);
    http::response_parser<http::string_body> parser;
    parser.body_limit(64u << 20);
    beast::error_code ec;
    with_stream([&](auto& s) {
      http::async_read(s, buffer_, parser, [&](beast::error_code e, std::size_t n) {
        ec = e;
        g_wire_bytes += n;
      });
      return 0;
    });
    run();
    if (ec) throw Transient(fmt::format("reading from {} failed: {}", host_, ec.message()));
    return parser.release();
  }

  // A streamed response (watch): calls on_line for every newline-terminated message until it returns true
  // (true), or the deadline passes (false).
  template <class OnLine>
  bool stream(const std::string& target, const std::string& body, TimePoint deadline, OnLine on_line) {
    send(target, body, deadline);
    http::response_parser<http::string_body> parser;
    parser.body_limit(boost::none);
    std::string pending;
    auto on_chunk = [&](std::uint64_t, beast::string_view data, beast::error_code&) {
      pending.append(data.data(), data.size());
      g_wire_bytes += data.size();
      return data.size();
    };
    parser.on_chunk_body(on_chunk);
    beast::error_code ec;
    with_stream([&](auto& s) {
      http::async_read_header(s, buffer_, parser, [&](beast::error_code e, std::size_t) { ec = e; });
      return 0;
    });
    run();
    if (ec == beast::error::timeout) return false;
    if (ec) throw Transient(fmt::format("watch on {} failed: {}", host_, ec.message()));
    if (parser.get().result() != http::status::ok) {
      // An error answer is not chunked: read it whole.
      with_stream([&](auto& s) {
        http::async_read(s, buffer_, parser, [&](beast::error_code e, std::size_t) { ec = e; });
        return 0;
      });
      run();
      throw_error_body(parser.get().result_int(), parser.get().body());
    }
    for (;;) {
      for (auto nl = pending.find('\n'); nl != std::string::npos; nl = pending.find('\n')) {
        auto line = pending.substr(0, nl);
        pending.erase(0, nl + 1);
        if (line.find_first_not_of(" \r\t") != std::string::npos && on_line(line)) return true;
      }
      if (parser.is_done()) throw Transient(fmt::format("{} ended the watch", host_));
      with_stream([&](auto& s) {
        http::async_read_some(s, buffer_, parser, [&](beast::error_code e, std::size_t) { ec = e; });
        return 0;
      });
      run();
      if (ec == beast::error::timeout) return false;
      if (ec) throw Transient(fmt::format("watch on {} failed: {}", host_, ec.message()));
    }
  }

 private:
  void run() {
    ioc_.restart();
    ioc_.run();
  }

  asio::io_context& ioc_;
  ssl::context* tls_ctx_;
  std::string host_;
  std::unique_ptr<beast::tcp_stream> tcp_;
  std::unique_ptr<beast::ssl_stream<beast::tcp_stream>> tls_;
  beast::flat_buffer buffer_;
};

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  return s;
}

}  // namespace

std::uint64_t wire_bytes() { return g_wire_bytes.load(); }

std::string prefix_end(std::string prefix) {
  while (!prefix.empty()) {
    auto& c = prefix.back();
    if (static_cast<unsigned char>(c) < 0xff) {
      c = static_cast<char>(static_cast<unsigned char>(c) + 1);
      return prefix;
    }
    prefix.pop_back();
  }
  return std::string(1, '\0');  // every key
}

Options parse_options(const RendezvousParameters& p) {
  Options o;
  auto protocol = p.config.count("protocol") ? lower(p.config.at("protocol")) : std::string();
  if (!protocol.empty() && protocol != "http" && protocol != "https")
    throw std::invalid_argument(fmt::format("--rdzv-conf protocol='{}': use http or https", protocol));
  std::string scheme;
  std::vector<std::string> items;
  for (std::size_t start = 0;;) {  // every item, empty ones too (an error below)
    auto comma = p.endpoint.find(',', start);
    items.push_back(p.endpoint.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  for (auto item : items) {
    while (!item.empty() && item.front() == ' ') item.erase(0, 1);
    while (!item.empty() && item.back() == ' ') item.pop_back();
    for (const char* s : {"http://", "https://"}) {
      if (lower(item).rfind(s, 0) != 0) continue;
      auto this_scheme = std::string(s, std::strlen(s) - 3);
      if (!scheme.empty() && scheme != this_scheme)
        throw std::invalid_argument(fmt::format("--rdzv-endpoint '{}': mixes http and https", p.endpoint));
      scheme = this_scheme;
      item = item.substr(std::strlen(s));
      while (!item.empty() && item.back() == '/') item.pop_back();
    }
    if (item.empty())
      throw std::invalid_argument(
          fmt::format("--rdzv-endpoint '{}': empty endpoint; use host:port[,host:port...]", p.endpoint));
    o.endpoints.push_back(parse_endpoint(item, kDefaultPort));
    if (o.endpoints.back().port == 0)
      throw std::invalid_argument(fmt::format("--rdzv-endpoint '{}': port 0 is not an etcd endpoint", p.endpoint));
  }
  if (o.endpoints.empty())
    throw std::invalid_argument(
        "--rdzv-backend etcd needs --rdzv-endpoint host:port[,host:port...] (etcd client URLs)");
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
  if (auto t = p.get_as_seconds("read_timeout")) {
    if (t->count() <= 0) throw std::invalid_argument("--rdzv-conf read_timeout must be positive");
    o.request_timeout = *t;
  }
  if (auto t = p.get_as_seconds("lease_ttl")) {
    if (*t < std::chrono::seconds(2)) throw std::invalid_argument("--rdzv-conf lease_ttl must be at least 2 s");
    o.lease_ttl = std::chrono::ceil<std::chrono::seconds>(*t);
  }
  return o;
}

struct Client::Impl {
  explicit Impl(const Options& o) : tls(ssl::context::tls_client) {
    if (!o.https) return;
    beast::error_code ec;
    tls.set_verify_mode(ssl::verify_peer, ec);
    if (o.cacert.empty())
      tls.set_default_verify_paths(ec);
    else
      tls.load_verify_file(o.cacert, ec);
    if (ec)
      throw store::StoreError(fmt::format("etcd: cannot load the CA certificate '{}': {}", o.cacert, ec.message()));
    if (!o.cert.empty()) {
      tls.use_certificate_chain_file(o.cert, ec);
      if (ec)
        throw store::StoreError(fmt::format("etcd: cannot load the client certificate '{}': {}", o.cert, ec.message()));
      tls.use_private_key_file(o.key, ssl::context::pem, ec);
      if (ec) throw store::StoreError(fmt::format("etcd: cannot load the client key '{}': {}", o.key, ec.message()));
    }
    https = true;
  }

  ssl::context* tls_context() { return https ? &tls : nullptr; }
  // One request with failover (holds the mutex: one request at a time on the client's connection).
  json call(const Options& o, const char* path, const json& body);

  std::mutex mutex;  // guards conn, ioc (one request at a time), current
  asio::io_context ioc;
  std::unique_ptr<Connection> conn;
  std::size_t current = 0;  // the endpoint in use; moves on after a transient failure
  ssl::context tls;
  bool https = false;
};

Client::Client(Options options) : options_(std::move(options)), impl_(std::make_unique<Impl>(options_)) {
  if (options_.endpoints.empty()) throw store::StoreError("etcd client needs at least one endpoint");
  // Start at a random member, as etcd's own clients balance: the gateway's JSON work is spread over the cluster.
  impl_->current = std::random_device{}() % options_.endpoints.size();
}

Client::~Client() = default;

std::string Client::endpoints() const {
  std::string out;
  for (const auto& ep : options_.endpoints) out += (out.empty() ? "" : ",") + ep.to_string();
  return out;
}

namespace {

// Runs attempt(endpoint, attempt deadline) until it returns, failing over and backing off on Transient errors.
template <class F>
auto with_failover(const Options& o, std::size_t& current, const char* what, F attempt) {
  const auto deadline = store::Clock::now() + o.request_timeout;
  auto backoff = std::chrono::milliseconds(50);
  std::string last;
  for (std::size_t tries = 1;; ++tries) {
    const std::size_t index = current % o.endpoints.size();
    try {
      return attempt(o.endpoints[index], std::min(deadline, store::Clock::now() + o.attempt_timeout));
    } catch (const Transient& e) {
      last = fmt::format("{}: {}", o.endpoints[index].to_string(), e.what());
      log::get("rdzv")->debug("etcd {}: {}; trying the next endpoint", what, last);
      current = index + 1;
    }
    const auto now = store::Clock::now();
    if (now >= deadline)
      throw store::StoreError(fmt::format(
          "etcd {} failed: no member of the etcd cluster at {} answered within {:.1f} s (last error: {}). Check that "
          "the etcd cluster is up and --rdzv-endpoint lists its client URLs",
          what,
          [&] {
            std::string s;
            for (const auto& ep : o.endpoints) s += (s.empty() ? "" : ",") + ep.to_string();
            return s;
          }(),
          std::chrono::duration<double>(o.request_timeout).count(), last));
    if (tries % o.endpoints.size() == 0) {  // every endpoint failed once: back off before the next pass
      std::this_thread::sleep_for(
          std::min<store::Duration>(backoff, std::chrono::ceil<store::Duration>(deadline - now)));
      backoff = std::min(backoff * 2, std::chrono::milliseconds(1000));
    }
  }
}

}  // namespace

RangeResult Client::range(const std::string& key, const std::string& range_end, bool keys_only, bool count_only,
                          std::int64_t revision) {
  json body{{"key", b64(key)}};
  if (revision > 0) body["revision"] = std::to_string(revision);
  if (!range_end.empty()) body["range_end"] = b64(range_end);
  if (keys_only) body["keys_only"] = true;
  if (count_only) body["count_only"] = true;
  return to_range(impl_->call(options_, "/v3/kv/range", body));
}

std::int64_t Client::put(const std::string& key, const std::string& value, std::int64_t lease) {
  json body{{"key", b64(key)}, {"value", b64(value)}};
  if (lease) body["lease"] = std::to_string(lease);
  auto r = impl_->call(options_, "/v3/kv/put", body);
  return i64(r["header"], "revision");
}

std::int64_t Client::delete_range(const std::string& key, const std::string& range_end) {
  json body{{"key", b64(key)}};
  if (!range_end.empty()) body["range_end"] = b64(range_end);
  return i64(impl_->call(options_, "/v3/kv/deleterange", body), "deleted");
}

TxnResult Client::txn(const std::vector<Compare>& compare, const std::vector<Op>& success,
                      const std::vector<Op>& failure) {
  json body{{"compare", json::array()}, {"success", json::array()}, {"failure", json::array()}};
  for (const auto& c : compare) body["compare"].push_back(compare_json(c));
  for (const auto& op : success) body["success"].push_back(op_json(op));
  for (const auto& op : failure) body["failure"].push_back(op_json(op));
  auto r = impl_->call(options_, "/v3/kv/txn", body);
  TxnResult t;
  t.succeeded = r.value("succeeded", false);
  t.revision = i64(r["header"], "revision");
  if (auto it = r.find("responses"); it != r.end())
    for (const auto& resp : *it) {
      if (auto rp = resp.find("response_put"); rp != resp.end() && !t.prev_kv && rp->contains("prev_kv")) {
        json wrapped{{"kvs", json::array({(*rp)["prev_kv"]})}};
        t.prev_kv = to_range(wrapped).kvs.front();
      }
      if (auto rr = resp.find("response_range"); rr != resp.end()) {
        auto range = to_range(*rr);
        if (!range.revision) range.revision = t.revision;
        t.ranges.push_back(std::move(range));
      }
    }
  return t;
}

std::int64_t Client::lease_grant(std::chrono::seconds ttl) {
  auto r = impl_->call(options_, "/v3/lease/grant", json{{"TTL", std::to_string(ttl.count())}});
  if (r.contains("error") && !r["error"].get<std::string>().empty())
    throw store::StoreError("etcd lease grant failed: " + r["error"].get<std::string>());
  return i64(r, "ID");
}

std::int64_t Client::lease_keep_alive(std::int64_t id) {
  auto r = impl_->call(options_, "/v3/lease/keepalive", json{{"ID", std::to_string(id)}});
  if (auto it = r.find("error"); it != r.end()) throw store::StoreError("etcd lease keep-alive failed: " + it->dump());
  return i64(r.value("result", json::object()), "TTL");
}

void Client::lease_revoke(std::int64_t id) {
  try {
    impl_->call(options_, "/v3/lease/revoke", json{{"ID", std::to_string(id)}});
  } catch (const EtcdError& e) {
    if (e.code() != EtcdError::kNotFound) throw;
  }
}

bool Client::watch_put(const std::string& key, std::int64_t start_revision, TimePoint deadline) {
  auto next = start_revision;
  std::string last;
  auto failing_since = store::Clock::time_point::max();
  std::size_t tries = 0;
  for (;;) {
    std::size_t index;
    {
      std::lock_guard lock(impl_->mutex);
      index = impl_->current % options_.endpoints.size();
    }
    const auto& ep = options_.endpoints[index];
    try {
      asio::io_context ioc;
      Connection conn(ioc, impl_->tls_context());
      conn.open(ep, std::min(deadline, store::Clock::now() + options_.attempt_timeout));
      json req{{"create_request", {{"key", b64(key)}, {"start_revision", std::to_string(next)}}}};
      bool seen = false;
      auto on_line = [&](const std::string& line) {
        json j = json::parse(line, nullptr, false);
        if (!j.is_object()) throw Transient("unreadable watch message: " + line.substr(0, 200));
        if (auto e = j.find("error"); e != j.end()) throw_error_body(200, line);
        const auto& r = j.value("result", json::object());
        failing_since = store::Clock::time_point::max();
        if (r.value("canceled", false))
          throw Transient(fmt::format("watch canceled: {} (compacted at {})", r.value("cancel_reason", ""),
                                      i64(r, "compact_revision")));
        for (const auto& ev : r.value("events", json::array())) {
          next = std::max(next, i64(ev["kv"], "mod_revision") + 1);
          if (ev.value("type", "PUT") == "PUT") seen = true;
        }
        return seen;
      };
      return conn.stream("/v3/watch", req.dump(), deadline, on_line);
    } catch (const Transient& e) {
      last = fmt::format("{}: {}", ep.to_string(), e.what());
      log::get("rdzv")->debug("etcd watch of '{}': {}; trying the next endpoint", key, last);
      std::lock_guard lock(impl_->mutex);
      if (impl_->current % options_.endpoints.size() == index) impl_->current = index + 1;
    }
    const auto now = store::Clock::now();
    if (failing_since == store::Clock::time_point::max()) failing_since = now;
    if (now >= deadline) return false;
    if (now - failing_since >= options_.request_timeout)
      throw store::StoreError(fmt::format(
          "etcd watch failed: no member of the etcd cluster at {} answered within {:.1f} s (last error: {})",
          endpoints(), std::chrono::duration<double>(options_.request_timeout).count(), last));
    if (++tries % options_.endpoints.size() == 0)
      std::this_thread::sleep_for(std::min<store::Duration>(std::chrono::milliseconds(200),
                                                            std::chrono::ceil<store::Duration>(deadline - now)));
  }
}

json Client::Impl::call(const Options& o, const char* path, const json& body) {
  const auto text = body.dump();
  std::lock_guard lock(mutex);
  return with_failover(o, current, path, [&](const Endpoint& ep, TimePoint deadline) {
    try {
      if (!conn || !conn->is_open()) {
        conn = std::make_unique<Connection>(ioc, tls_context());
        conn->open(ep, deadline);
      }
      auto res = conn->exchange(path, text, deadline);
      if (!res.keep_alive()) conn.reset();
      if (res.result() != http::status::ok) throw_error_body(res.result_int(), res.body());
      json j = json::parse(res.body(), nullptr, false);
      if (!j.is_object()) throw Transient("unreadable answer: " + res.body().substr(0, 200));
      return j;
    } catch (...) {
      conn.reset();  // a half-used connection is never reused
      throw;
    }
  });
}

}  // namespace ctrun::rdzv::etcd
