#pragma once
// The TCPStore server's state and command semantics, without any networking: keys, queues, pending waits
// and 1.13 watch registrations, executed one decoded request at a time. The Asio side (server.cpp) owns
// connections and calls in here from its single loop thread, so nothing here locks. Keeping it separate
// makes the semantics readable on their own and lets the fuzzer drive them without sockets.
//
// Semantics follow PyTorch's servers (docs/protocol.md): the legacy backend's replies byte for byte, with
// the libuv backend's superset where they differ (compare_set wakes waiters, queues count as present).

#include <array>
#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "store/protocol.hpp"

namespace ctrun::store::detail {

using ConnId = std::uint64_t;

// Where replies go. The keyspace appends the bytes for a connection (its own reply, or a deferred WAIT
// reply / watch event for another connection); the server writes them out after the request is handled.
class ReplySink {
 public:
  virtual ~ReplySink() = default;
  // The output buffer of a live connection, or nullptr if it is gone. Stays valid during one execute().
  virtual std::string* output(ConnId conn) = 0;
};

// What the server must do with the requesting connection after execute().
struct ExecResult {
  bool close = false;  // protocol says: fail this request by closing (after sending what was queued)
  std::string reason;  // for the log
};

class Keyspace {
 public:
  Keyspace(ReplySink& sink, std::uint64_t max_total_bytes) : sink_(sink), max_total_bytes_(max_total_bytes) {}

  ExecResult execute(ConnId conn, const protocol::Request& request);

  // The connection is gone: drop its pending wait and its watches.
  void forget(ConnId conn);

  // Drops every key, queue and pending wait (the agent's fresh keyspace per attempt). Waiters are not
  // answered: their keys did not appear, and their clients time out and cancel as usual. 1.13 watch
  // registrations belong to connections, not to the keyspace, and stay.
  void clear();

  std::optional<std::string> get(const std::string& key) const;
  void set(const std::string& key, std::string value);  // the owner's set: wakes waiters like SET
  std::vector<std::string> keys() const;

  std::uint64_t num_keys() const { return data_.size(); }
  std::uint64_t bytes() const { return bytes_; }
  std::uint64_t pending_waits() const { return waits_.size(); }
  std::uint64_t ops(protocol::Command c) const { return ops_[static_cast<std::size_t>(c)]; }

  // Bytes the server holds outside the keyspace (buffered input, queued output); they count against
  // max_total_bytes too, so that the limit bounds the whole process.
  void set_io_bytes(std::uint64_t n) { io_bytes_ = n; }

 private:
  struct WaitRegistration {
    std::vector<std::string> keys;  // the keys still missing when the wait was registered
    std::size_t remaining = 0;      // how many of them have not appeared yet
    bool barrier = false;           // a BARRIER arrival: woken only when the count is reached
  };

  bool present(const std::string& key) const;
  bool fits(std::uint64_t growth) const;
  void reply_u8(ConnId conn, std::uint8_t v);
  void register_wait(ConnId conn, std::vector<std::string> missing, bool barrier);
  void drop_wait(ConnId conn);
  // A key appeared or changed: every waiter on it counts it; those with nothing left get STOP_WAITING.
  void wake_all(const std::string& key, bool include_barrier = true);
  // A queue element arrived: wake at most one waiter on the key (queue semantics: one consumer per item).
  void wake_one(const std::string& key);
  void notify_watchers(const std::string& key, protocol::WatchResponse type, std::string_view old_value,
                       std::string_view new_value);
  void store(const std::string& key, std::string value);  // SET semantics: store, wake, notify

  ReplySink& sink_;
  std::uint64_t max_total_bytes_;
  std::uint64_t io_bytes_ = 0;
  std::uint64_t bytes_ = 0;  // keys + values + queued elements

  std::unordered_map<std::string, std::string> data_;
  std::unordered_map<std::string, std::deque<std::string>> queues_;
  std::unordered_map<std::string, std::vector<ConnId>> waiters_;   // key -> connections waiting on it
  std::unordered_map<ConnId, WaitRegistration> waits_;             // at most one pending wait per connection
  std::unordered_map<std::string, std::vector<ConnId>> watchers_;  // 1.13 WATCH_KEY
  std::unordered_map<ConnId, std::vector<std::string>> watched_by_;
  std::array<std::uint64_t, static_cast<std::size_t>(protocol::Command::kBarrier) + 1> ops_{};
};

}  // namespace ctrun::store::detail
