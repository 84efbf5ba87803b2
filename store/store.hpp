#pragma once
// The abstract key/value store every layer above talks to (rendezvous, agent, comm).
// Semantics follow PyTorch's c10d::Store (see docs/protocol.md): keys and values are opaque byte strings,
// `add` stores decimal ASCII, `get` waits for the key, `wait` throws TimeoutError naming the keys.
// Implementations: TcpStore (client of a TCPStore server, ours or PyTorch's), PrefixStore, MemoryStore.
// All implementations are safe to call from several threads.

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace ctrun::store {

using Clock = std::chrono::steady_clock;
using Duration = std::chrono::milliseconds;

// PyTorch's Store::kDefaultTimeout.
inline constexpr Duration kDefaultTimeout = std::chrono::seconds(300);

// Any store failure: a lost connection, a server that closed on us, a protocol violation.
class StoreError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A wait (or get, or barrier) did not complete in time. what() names the keys and the timeout.
class TimeoutError : public StoreError {
 public:
  using StoreError::StoreError;
};

// The server turned the connection away and said why (protocol::kRefusalMarker): it holds as many connections as
// it can. what() is "the TCPStore at H:P refuses connections: <reason>"; reason() is the server's own words.
class RefusedError : public StoreError {
 public:
  RefusedError(const std::string& what, std::string reason) : StoreError(what), reason_(std::move(reason)) {}
  const std::string& reason() const { return reason_; }

 private:
  std::string reason_;
};

// How an asynchronous wait (Store::wait_async) ended.
enum class WaitOutcome : std::uint8_t {
  kReady,      // every key exists
  kCancelled,  // AsyncWait::cancel() withdrew it
  kFailed,     // it cannot complete: the connection was lost (the error says why)
};
using WaitDone = std::function<void(WaitOutcome outcome, const std::string& error)>;

// A pending asynchronous wait. Its `done` runs exactly once.
class AsyncWait {
 public:
  virtual ~AsyncWait() = default;
  // Withdraws the wait: `done` runs with kCancelled now (on the caller's thread), unless it has run or is
  // running with another outcome. Never blocks.
  virtual void cancel() = 0;
};

class Store {
 public:
  virtual ~Store() = default;

  // Overwrites key; wakes waiters of key.
  virtual void set(const std::string& key, std::string_view value) = 0;

  // Waits (up to timeout()) until key exists, then returns its value.
  virtual std::string get(const std::string& key) = 0;

  // Three cases, as PyTorch: key present and equal to expected -> replaced by desired; key missing and
  // expected empty -> created with desired; key missing and expected non-empty -> nothing, returns expected.
  // Returns the value the key holds afterwards (or `expected` in the third case).
  virtual std::string compare_set(const std::string& key, std::string_view expected, std::string_view desired) = 0;

  // Adds delta to the decimal integer stored at key (missing = 0), stores the result as decimal, returns it.
  virtual std::int64_t add(const std::string& key, std::int64_t delta) = 0;

  // True iff every key exists (a non-empty queue counts). An empty list is true.
  virtual bool check(const std::vector<std::string>& keys) = 0;

  // Blocks until every key exists; throws TimeoutError after timeout.
  virtual void wait(const std::vector<std::string>& keys, Duration timeout) = 0;
  void wait(const std::vector<std::string>& keys) { wait(keys, timeout()); }

  // Number of keys in the whole store (not filtered by any prefix), as PyTorch.
  virtual std::int64_t num_keys() = 0;

  // True if the key existed.
  virtual bool delete_key(const std::string& key) = 0;

  // Concatenates value to key's value (creates it if missing); wakes waiters.
  virtual void append(const std::string& key, std::string_view value) = 0;

  // Waits for all keys, then returns their values in order.
  virtual std::vector<std::string> multi_get(const std::vector<std::string>& keys) = 0;

  // Sets every pair; keys.size() must equal values.size().
  virtual void multi_set(const std::vector<std::string>& keys, const std::vector<std::string>& values) = 0;

  // FIFO queues (torch >= 2.8). queue_pop waits up to timeout() for an element when block is true,
  // else returns nullopt on an empty queue.
  virtual void queue_push(const std::string& key, std::string_view value) = 0;
  virtual std::optional<std::string> queue_pop(const std::string& key, bool block) = 0;
  virtual std::int64_t queue_len(const std::string& key) = 0;

  // Every key in the store (unprefixed view; PrefixStore filters and strips its prefix).
  virtual std::vector<std::string> list_keys() = 0;

  // Server-side counting barrier on a fresh key: returns once world_size callers have arrived.
  virtual void barrier(const std::string& key, std::int64_t world_size, Duration timeout) = 0;

  // ctrun's ON_CLOSE extension (ctstore only): when this client's connection closes (its process died, or the
  // connection broke), the server appends `on_close` to `key`, creating it and waking its waiters. A client that
  // reconnects appends `on_reconnect` to `key` and registers again, so readers of the key can tell a blip (the
  // close followed by the reconnect) from a death. Returns false where the store has no such thing (torch's
  // servers, the legacy dialect, in-process and etcd stores): the caller needs another way (heartbeats).
  virtual bool append_on_close(const std::string& /*key*/, std::string_view /*on_close*/,
                               std::string_view /*on_reconnect*/) {
    return false;
  }
  // Withdraws a registration of append_on_close (nothing where it had none).
  virtual void cancel_on_close(const std::string& /*key*/) {}

  // ctrun's ON_SILENCE extension (ctstore and ctrun's embedded server): when this client's connection has sent
  // nothing for `timeout` (its process hung, or its host is cut off, though the connection stands), the server
  // appends `on_silence` to `key`, once, waking its waiters; when the client speaks again, `on_back`. Registrations
  // are sent again after a reconnect. Returns false where the store has no such thing (the caller times its
  // members' heartbeats itself).
  virtual bool append_on_silence(const std::string& /*key*/, std::string_view /*on_silence*/,
                                 std::string_view /*on_back*/, Duration /*timeout*/) {
    return false;
  }
  virtual void cancel_on_silence(const std::string& /*key*/) {}

  // A WAIT that holds no thread, where the store has one (MuxStore: many may be pending on one connection; the
  // wrappers pass it on). `done` runs once, on a thread of the store's: it must neither block nor call this store
  // synchronously (post the work elsewhere). nullptr where the store has no such thing: store::wait_async()
  // (async_wait.hpp) then waits on a thread of its own.
  virtual std::shared_ptr<AsyncWait> wait_async(const std::vector<std::string>& /*keys*/, WaitDone /*done*/) {
    return nullptr;
  }

  // The values of keys that may be missing (nullopt for those), without waiting for any: one COMPARE_SET(key, S, S)
  // per key, which returns S for a missing key and creates nothing (PyTorch's contract above). `sentinel` S must be
  // a value none of the keys holds. A store that pipelines (MuxStore) sends them all in one write: one round trip;
  // on ctrun's servers (ctstore, the agent's store: kFeaturePeek) it sends one PEEK, one request for all the keys.
  virtual std::vector<std::optional<std::string>> peek(const std::vector<std::string>& keys,
                                                       std::string_view sentinel) {
    std::vector<std::optional<std::string>> out;
    out.reserve(keys.size());
    for (const auto& k : keys) {
      auto v = compare_set(k, sentinel, sentinel);
      out.push_back(v == sentinel ? std::nullopt : std::optional<std::string>(std::move(v)));
    }
    return out;
  }

  // Default timeout for get/wait/multi_get/queue_pop.
  virtual Duration timeout() const = 0;
  virtual void set_timeout(Duration timeout) = 0;
};

}  // namespace ctrun::store
