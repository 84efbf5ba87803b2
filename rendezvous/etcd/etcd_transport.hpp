#pragma once
// HTTP/1.1 to one etcd member, plain or TLS, every step bounded by a deadline: a POST and its answer, or a POST
// whose answer streams (a watch), read line by line. Beast and Asio stay in http_session.hpp and the .cpp files;
// OpenSSL in the TLS module (tls_module.hpp), which TlsContext loads.

#include <cstdint>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>

#include "rendezvous/etcd/etcd_options.hpp"
#include "rendezvous/etcd/session.hpp"
#include "rendezvous/parameters.hpp"
#include "store/store.hpp"

namespace ctrun::rdzv::etcd {

// What every TLS connection of a client trusts and shows: the CA (or the system's), the client certificate and key.
class TlsContext {
 public:
  // Throws store::StoreError naming the file that cannot be loaded, or when ctrun's TLS module is missing.
  explicit TlsContext(const Options& options);
  ~TlsContext();
  TlsContext(const TlsContext&) = delete;
  TlsContext& operator=(const TlsContext&) = delete;

 private:
  friend class Connection;
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// One open connection. Any exception leaves it half-used: drop it then. Not thread-safe.
class Connection {
 public:
  // Connects (and shakes hands when tls is set) by `deadline`. Throws TransientError when the member cannot be
  // reached; store::StoreError when TLS refuses its certificate (every member would, every time).
  Connection(const Endpoint& endpoint, TlsContext* tls, store::Clock::time_point deadline);
  ~Connection();
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  // POST body (JSON) to target and read the answer, by deadline; TransientError on a transport failure.
  HttpAnswer post(const std::string& target, const std::string& body, store::Clock::time_point deadline);

  // POST whose answer streams: calls on_line for every non-blank line until it returns true (then true), or until
  // the deadline passes (false). Throws HttpErrorAnswer for an error status, TransientError when the stream breaks.
  bool post_streamed(const std::string& target, const std::string& body, store::Clock::time_point deadline,
                     const std::function<bool(const std::string&)>& on_line);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// HTTP bytes this process exchanged with etcd so far (requests, answers, watch bodies).
std::uint64_t http_bytes_exchanged();

}  // namespace ctrun::rdzv::etcd
