#pragma once
// The TCPStore server: PyTorch-compatible (both dialects, chosen per connection), one Asio event loop,
// no thread per connection. Embeddable (the agent hosts one for its workers) and standalone (ctstore).
// Asio stays inside server.cpp (pimpl) so this header is cheap to include.

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "store/protocol.hpp"

namespace ctrun::auth {
class Secret;
}

namespace boost::asio {
class io_context;
}

namespace ctrun::store {

namespace detail {
class Backend;
class FrontEnd;
}  // namespace detail

struct ServerOptions {
  std::string host = "0.0.0.0";  // "::" for dual stack; a host name is resolved
  std::uint16_t port = 0;        // 0 -> ephemeral; Server::port() reports the real one
  int backlog = -1;              // -1 -> /proc/sys/net/core/somaxconn
  protocol::Limits limits;
  std::uint64_t max_total_bytes = 4ull << 30;  // keys + values + queued replies; beyond: reject writes, close
  // 0: as many as the process's descriptor limit allows (soft RLIMIT_NOFILE minus a reserve). A larger
  // value is lowered to that, with a warning: past the fd limit new clients would starve silently.
  std::uint64_t max_connections = 0;
  // Replies queued for one connection that does not read them. Past 4 MiB the server stops reading that
  // connection's requests (so a pipelining client cannot grow it); past this hard limit (a watcher that
  // never reads its events, say) the connection is closed.
  std::uint64_t max_pending_output_bytes = 256ull << 20;
  bool reuse_address = true;
  // A connection whose request is still incomplete this long after the request's first byte, plus 1 s per
  // 64 KiB received (an honest slow sender of a big value), is closed: a stall or a trickle (slowloris).
  // Connections with no partial request (idle, or blocked in WAIT) are never timed out.
  std::chrono::milliseconds partial_request_timeout{30000};
  // Called once, on the loop thread, if the server's loop fails (an exception escaped a handler: out of
  // memory, a bug). By then every socket is closed and later calls on the Server throw StoreError with
  // the same message. ctstore exits non-zero; an embedding agent should fail its job loudly.
  std::function<void(const std::string& what)> on_failure;
  // The job's secret (common/auth/secret.hpp): every client proves it holds it (common/auth/handshake.hpp) before
  // any request of it is read, and one that does not is closed and logged with its address. Unset: anyone who
  // reaches the port is served, as by torch's TCPStore.
  std::shared_ptr<const auth::Secret> secret;
};

// Why the server turned a client away or closed its connection (one count per connection): over
// --max-connections, out of descriptors, bytes that are no request, a command the keyspace refused as invalid
// (a missing key where the protocol fails, a non-integer ADD), --max-total-bytes, unread replies past
// --max-pending-bytes (or closed to make room when memory is full), a request incomplete past --request-timeout.
enum class Refused : std::uint8_t {
  kConnectionCap,
  kDescriptors,
  kBadRequest,
  kInvalidCommand,
  kMemory,
  kUnreadReplies,
  kRequestTimeout,
  kUnauthenticated,  // the last: failed the job's handshake (ServerOptions::secret)
};
// "connection_cap", "descriptors", "bad_request", "invalid_command", "memory_limit", "unread_replies",
// "request_timeout", "unauthenticated": ctstore's stats line and its metrics' `reason` label.
const char* refused_name(Refused reason);

// Counters for ctstore's stats line, its metrics and tests. Kept by the server's loop as plain counters (no
// atomics on the hot path); stats() copies them on the loop.
struct ServerStats {
  std::uint64_t connections_accepted = 0;
  std::uint64_t connections_open = 0;
  std::uint64_t connections_rejected = 0;                      // the sum of `refused`
  std::vector<std::pair<std::string, std::uint64_t>> refused;  // (refused_name, count) for every reason
  std::uint64_t bytes_in = 0;                                  // read from clients
  std::uint64_t bytes_out = 0;                                 // written to clients
  std::uint64_t keys = 0;
  std::uint64_t bytes = 0;  // bytes of keys + values held
  std::uint64_t pending_waits = 0;
  std::uint64_t held_bytes = 0;                            // everything counted against max_total_bytes
  std::vector<std::pair<std::string, std::uint64_t>> ops;  // (command name, count), every command seen
};

class Server {
 public:
  explicit Server(ServerOptions options);
  // The same connection handling (both dialects, limits, flow control) with requests run against another backend
  // (store/backend.hpp: a relay's upstream, store/relay.hpp), made once by `make` with the server's side. With `io`
  // the server runs on that context, which the caller runs; every call on the Server is then made from that
  // context's thread (or while it is not running), and the Server is destroyed after it stopped running. Without,
  // on a thread of its own. The keyspace owner's calls below (clear, get_local, ...) throw StoreError there.
  using MakeBackend = std::function<std::unique_ptr<detail::Backend>(detail::FrontEnd& front)>;
  Server(ServerOptions options, const MakeBackend& make, boost::asio::io_context* io = nullptr);
  ~Server();  // stops and joins
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // Binds and listens (throws StoreError with the address on failure), then runs the event loop on an
  // internal thread. Returns once the server accepts connections.
  void start();
  // Closes every connection and joins the loop thread. Idempotent.
  void stop();

  std::uint16_t port() const;
  const std::string& host() const;
  // The effective connection cap (after ServerOptions::max_connections was resolved against the fd limit).
  std::uint64_t max_connections() const;
  // Why the loop failed, if it did (see ServerOptions::on_failure); nullopt while healthy.
  std::optional<std::string> failure() const;

  // Owner access to the keyspace (thread-safe; runs on the loop).
  // Drops every key, queue and pending wait registration (fresh keyspace per attempt). Queued on the loop without
  // waiting for it: the loop runs what is queued in order, so any later owner call, and any client that connects
  // after this returns, sees the cleared keyspace; the caller's thread (an agent's event loop) is never held up.
  void clear();
  std::optional<std::string> get_local(const std::string& key);
  void set_local(const std::string& key, std::string value);
  std::vector<std::string> keys_local();
  ServerStats stats();
  // Runs fn on the server's loop and waits for it (inline on the loop's thread, or when no loop runs).
  void run_on_loop(const std::function<void()>& fn);
  // Queues fn on the server's loop (inline when no loop runs).
  void post_to_loop(std::function<void()> fn);

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ctrun::store
