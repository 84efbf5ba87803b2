#pragma once
// Synchronous TCPStore client mirroring torch's Store API. Talks to our server or to PyTorch's:
// the v2 dialect (VALIDATE + PING) or torch <= 2.0's legacy one, detected on the first connection unless
// TcpStoreOptions::dialect says which.
// Connects with exponential backoff and jitter until the connect timeout. Thread-safe (one request at a time).
//
// Behaviour worth knowing:
// - User keys go on the wire as key_prefix + key ("/" + key, as torch); add_init_key's "init/" is sent bare.
// - get/multi_get/queue_pop(block) first WAIT (as torch), so a missing key gives TimeoutError naming it.
// - A timed-out wait or barrier: v2 sends CANCEL_WAIT and reads its reply on the same connection (if the
//   keys appeared just before the cancel, STOP_WAITING arrives first and the wait counts as successful).
//   torch <= 2.0 servers have no CANCEL_WAIT and would later push a stray reply, so in the legacy dialect the
//   connection is closed instead and the next call reconnects transparently (the server forgets the wait on
//   disconnect). add_init_key is not repeated on such a reconnect.
// - Every reply is read with the store timeout as deadline (SO_RCVTIMEO; no progress for that long = error),
//   so a hung server gives StoreError, never a hang; a dead one gives StoreError at once. After any I/O error
//   the connection is dropped and the next call reconnects (within connect_timeout).
// - Legacy dialect: append, multi_get, multi_set and barrier are emulated as torch's Store base class and
//   torch 1.13's store-based barrier do (compare_set loop, one key at a time, ADD polling); queue ops,
//   list_keys and ping need v2 and throw StoreError.

#include <memory>
#include <optional>
#include <string>

#include "store/protocol.hpp"
#include "store/store.hpp"

namespace ctrun::auth {
class Secret;
}

namespace ctrun::store {

// The store and this client disagree about the job's secret (one has none, or another): retrying cannot help, so
// the connect gives up at once, saying which (common/auth/handshake.hpp's client_words).
class StoreAuthError : public StoreError {
 public:
  using StoreError::StoreError;
};

struct TcpStoreOptions {
  std::string host = "127.0.0.1";
  std::uint16_t port = 29500;
  // The server's dialect; unset: detected on the first connection (v2's VALIDATE + PING; if the server
  // closes the connection in answer, torch <= 2.0's legacy dialect, checked with GETNUMKEYS), then kept.
  std::optional<protocol::Dialect> dialect;
  Duration timeout = kDefaultTimeout;  // default for get/wait (Store::timeout())
  Duration connect_timeout = std::chrono::seconds(60);
  // Like torch's TCPStore(world_size=N): send ADD "init/" 1 after connecting (not prefixed with '/').
  bool add_init_key = false;
  // torch's client prefixes every user key with "/" on the wire; keep that for interop.
  std::string key_prefix = "/";
  // The job's secret: every connection proves it to the server (common/auth/handshake.hpp) before its first request.
  std::shared_ptr<const auth::Secret> secret;
};

class TcpStore final : public Store {
 public:
  explicit TcpStore(TcpStoreOptions options);  // connects; throws StoreError after connect_timeout
  ~TcpStore() override;

  void set(const std::string& key, std::string_view value) override;
  std::string get(const std::string& key) override;
  std::string compare_set(const std::string& key, std::string_view expected, std::string_view desired) override;
  std::int64_t add(const std::string& key, std::int64_t delta) override;
  bool check(const std::vector<std::string>& keys) override;
  using Store::wait;
  void wait(const std::vector<std::string>& keys, Duration timeout) override;
  std::int64_t num_keys() override;
  bool delete_key(const std::string& key) override;
  void append(const std::string& key, std::string_view value) override;
  std::vector<std::string> multi_get(const std::vector<std::string>& keys) override;
  void multi_set(const std::vector<std::string>& keys, const std::vector<std::string>& values) override;
  void queue_push(const std::string& key, std::string_view value) override;
  std::optional<std::string> queue_pop(const std::string& key, bool block) override;
  std::int64_t queue_len(const std::string& key) override;
  std::vector<std::string> list_keys() override;
  void barrier(const std::string& key, std::int64_t world_size, Duration timeout) override;
  // The first call tries the extension once; a server that closes the connection on it (torch's) is remembered
  // as without it (the next call reconnects). Registrations are sent again after every reconnect.
  bool append_on_close(const std::string& key, std::string_view on_close, std::string_view on_reconnect) override;
  void cancel_on_close(const std::string& key) override;
  Duration timeout() const override;
  void set_timeout(Duration timeout) override;
  // How long a reconnect (after a lost connection) keeps trying; the first connect used the options' value.
  void set_connect_timeout(Duration timeout);

  // PING round trip (v2 only); throws StoreError if the echo differs.
  void ping();
  const TcpStoreOptions& options() const;
  // The dialect in use (the detected one when TcpStoreOptions::dialect was unset).
  protocol::Dialect dialect() const;

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ctrun::store
