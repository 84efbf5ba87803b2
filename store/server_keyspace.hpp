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
#include <unordered_set>
#include <vector>

#include "store/protocol.hpp"
#include "store/reply_buffer.hpp"

namespace ctrun::store::detail {

using ConnId = std::uint64_t;

// Where replies go. The keyspace appends the bytes for a connection (its own reply, or a deferred WAIT
// reply / watch event for another connection); the server writes them out after the request is handled.
class ReplySink {
 public:
  virtual ~ReplySink() = default;
  // The output buffer of a live connection, or nullptr if it is gone. Stays valid during one execute().
  virtual ReplyBuffer* output(ConnId conn) = 0;
  // The server's memory is full: close connections that hold unread replies (never `except`), largest
  // first, until at least `bytes` are free or none is left. Returns whether anything was released.
  virtual bool reclaim(std::uint64_t /*bytes*/, ConnId /*except*/) { return false; }
};

// Bookkeeping cost counted for each entry the keyspace holds besides its bytes (a hash node, a queue
// slot, a wait or watch registration), so that a million empty values or registrations are not free.
inline constexpr std::uint64_t kEntryOverhead = 64;

// What the server must do with the requesting connection after execute().
struct ExecResult {
  bool close = false;  // protocol says: fail this request by closing (after sending what was queued)
  std::string reason;  // for the log
  // The request is not finished: call Keyspace::step() with the same request (kept alive and unchanged)
  // after letting other connections run. Big WAITs and MULTI_SETs are executed in slices this way, so
  // that one request cannot hold the loop for long.
  bool more = false;
};

// Keys handled per slice of a big WAIT or MULTI_SET, and stale wait entries removed per cleanup step.
inline constexpr std::size_t kSliceKeys = 4096;

class Keyspace {
 public:
  // max_reply_bytes: the most unread reply bytes one connection may hold; a reply that would pass it is
  // refused before it is built.
  Keyspace(ReplySink& sink, std::uint64_t max_total_bytes, std::uint64_t max_reply_bytes = 256ull << 20)
      : sink_(sink), max_total_bytes_(max_total_bytes), max_reply_bytes_(max_reply_bytes) {}

  ExecResult execute(ConnId conn, const protocol::Request& request);
  // Continues a request for which execute() (or the previous step()) returned `more`.
  ExecResult step(ConnId conn, const protocol::Request& request);
  // Removes a slice of stale wait entries left by big waits that ended; true while more remain.
  bool cleanup_step();
  bool has_cleanup() const { return !cleanup_.empty(); }

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
  // Everything counted against max_total_bytes except the server's I/O buffers: keys, values, queue
  // elements, wait and watch registrations, values no longer in the keyspace but still being sent.
  std::uint64_t held_bytes() const {
    return bytes_ + kEntryOverhead * (data_.size() + queues_.size() + queued_) + wait_bytes_ + watch_bytes_ +
           *orphaned_;
  }
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
    std::uint64_t cost = 0;         // counted in wait_bytes_
    std::uint64_t gen = 0;          // tells this registration's entries in waiters_ from stale ones
    bool registering = false;       // a big WAIT still being registered slice by slice: not answered yet
  };
  struct Waiter {
    ConnId conn;
    std::uint64_t gen;
  };
  // The progress of a request being executed in slices (at most one per connection).
  struct Slicing {
    std::size_t pos = 0;
    std::unordered_set<std::string_view> seen;  // WAIT: keys already looked at (views into the request)
  };
  // A big ended wait's entries still in waiters_, removed a slice at a time.
  struct Cleanup {
    std::vector<std::string> keys;
    std::size_t pos = 0;
    ConnId conn = 0;
    std::uint64_t gen = 0;
    std::uint64_t cost = 0;  // still counted in wait_bytes_ until done
  };
  ExecResult wait_slice(ConnId conn, const protocol::Request& r);
  ExecResult multi_set_slice(ConnId conn, const protocol::Request& r);
  void unregister_entries(const std::vector<std::string>& keys, std::size_t from, std::size_t to, ConnId conn,
                          std::uint64_t gen);

  bool present(const std::string& key) const;
  bool fits(std::uint64_t growth, ConnId conn);
  bool reply_fits(ConnId conn, std::uint64_t reply_bytes, std::string& why) const;
  void retire(BlobPtr& b);  // the keyspace lets go of a value
  void reply_u8(ConnId conn, std::uint8_t v);
  void register_wait(ConnId conn, std::vector<std::string> missing, bool barrier, std::uint64_t cost);
  void drop_wait(ConnId conn);
  // A key appeared or changed: every waiter on it counts it; those with nothing left get STOP_WAITING.
  void wake_all(const std::string& key, bool include_barrier = true);
  // A queue element arrived: wake at most one waiter on the key (queue semantics: one consumer per item).
  void wake_one(const std::string& key);
  void notify_watchers(const std::string& key, protocol::WatchResponse type, const BlobPtr& old_value, const BlobPtr& new_value);
  void store(const std::string& key, std::string value);  // SET semantics: store, wake, notify
  void put_value(const std::string& key, BlobPtr value);  // stores without waking (accounting only)

  ReplySink& sink_;
  std::uint64_t max_total_bytes_;
  std::uint64_t max_reply_bytes_;
  std::uint64_t io_bytes_ = 0;
  std::uint64_t bytes_ = 0;        // keys + values + queue keys and elements
  std::uint64_t queued_ = 0;       // queue elements
  std::uint64_t wait_bytes_ = 0;   // wait registrations
  std::uint64_t watch_bytes_ = 0;  // 1.13 watch registrations
  std::shared_ptr<std::uint64_t> orphaned_ = std::make_shared<std::uint64_t>(0);

  std::unordered_map<std::string, BlobPtr> data_;
  std::unordered_map<std::string, std::deque<BlobPtr>> queues_;
  std::unordered_map<std::string, std::vector<Waiter>> waiters_;   // key -> connections waiting on it
  std::unordered_map<ConnId, Slicing> slicing_;
  std::deque<Cleanup> cleanup_;
  std::uint64_t next_gen_ = 1;
  std::unordered_map<ConnId, WaitRegistration> waits_;             // at most one pending wait per connection
  std::unordered_map<std::string, std::vector<ConnId>> watchers_;  // 1.13 WATCH_KEY
  std::unordered_map<ConnId, std::vector<std::string>> watched_by_;
  std::array<std::uint64_t, static_cast<std::size_t>(protocol::Command::kBarrier) + 1> ops_{};
};

}  // namespace ctrun::store::detail
