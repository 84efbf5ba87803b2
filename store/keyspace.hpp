#pragma once
// The store's semantics, written once: keys, values, queues, pending waits and 1.13 watch registrations,
// one method per command returning a typed result (as torch's libuv backend), without any networking or
// encoding. What happens to other connections (a pending WAIT released, a watched key changed) is reported
// as typed events to the owner's KeyspaceEvents. Three users: the TCPStore server (server_commands.cpp
// encodes the results and the events with the codec, one decoded request at a time, from its single loop
// thread, so nothing here locks), MemoryStore and FileStore (through LocalKeyspace, store/local_keyspace.hpp:
// no connections, events ignored). The fuzzer drives it too.
//
// Semantics follow PyTorch's servers (docs/protocol.md): the legacy backend's replies byte for byte, with
// the libuv backend's superset where they differ (compare_set wakes waiters, queues count as present).
// Every byte held for a client is counted against max_total_bytes before it is allocated; a result whose
// `refused` is non-empty changed nothing and says why (the server closes the connection with it, the
// in-process stores throw StoreError with it).

#include <chrono>
#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "store/reply_buffer.hpp"

namespace ctrun::store::detail {

using ConnId = std::uint64_t;

// How a watched key changed (1.13 WATCH_KEY events).
enum class KeyChange : std::uint8_t { kUpdated, kCreated, kDeleted };

// What the keyspace tells its owner about connections other than a command's requester, in the order it
// happens (the server queues each as a reply after the bytes already queued for that connection), and what
// it asks about them. The keyspace encodes nothing: the server answers these through the codec
// (server_commands.hpp's ReplySink); in-process stores have no connections and ignore them.
class KeyspaceEvents {
 public:
  virtual ~KeyspaceEvents() = default;
  // conn's pending WAIT or BARRIER is over: every key is there, or the barrier count is reached.
  virtual void waiter_released(ConnId conn) = 0;
  // A key `watcher` watches changed; a missing side (the old value of a created key, the new one of a
  // deleted key) is null. The values are the keyspace's own, shared rather than copied.
  virtual void key_changed(ConnId watcher, KeyChange change, const std::string& key, const BlobPtr& old_value,
                           const BlobPtr& new_value) = 0;
  // Reply bytes conn has not read yet (0 for a connection that is gone): the per-connection reply budget.
  virtual std::uint64_t unread_reply_bytes(ConnId conn) = 0;
  // The server's memory is full: close connections that hold unread replies (never `except`), largest
  // first, until at least `bytes` are free or none is left. Returns whether anything was released.
  virtual bool reclaim(std::uint64_t /*bytes*/, ConnId /*except*/) { return false; }
};

// Bookkeeping cost counted for each entry the keyspace holds besides its bytes (a hash node, a queue
// slot, a wait or watch registration), so that a million empty values or registrations are not free.
inline constexpr std::uint64_t kEntryOverhead = 64;

// Keys handled per slice of a big WAIT or MULTI_SET, and stale wait entries removed per cleanup step.
inline constexpr std::size_t kSliceKeys = 4096;

// The connection id of in-process callers (MemoryStore, FileStore): no replies, no reply budget.
inline constexpr ConnId kLocalConn = 0;

// ---- typed results, one per command ----
// `refused` non-empty: the command was not done (a limit, a missing key where the protocol fails, a
// non-integer ADD operand) and nothing changed; the text says which limit, for the log and the client.
// Which limit or rule refused a command (ctstore's refused-requests metric counts them by kind).
enum class Refusal : std::uint8_t {
  kInvalid,      // the request itself: a missing key where the protocol fails, a non-integer ADD operand
  kMemory,       // --max-total-bytes
  kReplyBudget,  // --max-pending-bytes: the reply would pass the connection's unread-reply limit
};
struct Refusable {
  std::string refused;
  Refusal kind = Refusal::kInvalid;
  bool ok() const { return refused.empty(); }
};
struct SetResult : Refusable {};  // SET, APPEND, QUEUE_PUSH, WATCH_KEY
struct GetResult : Refusable {
  BlobPtr value;  // null: the key is missing
};
struct CompareSetResult : Refusable {
  BlobPtr value;        // what the key holds afterwards; the caller's `expected` if the key is missing
  bool stored = false;  // desired was stored
};
struct AddResult : Refusable {
  std::int64_t value = 0;
};
struct MultiGetResult : Refusable {
  std::vector<BlobPtr> values;  // in order, up to the first missing key
  bool missing = false;         // a key is missing (refused names it); values holds those before it
  bool more = false;            // a big one, gathered in slices: call continue_multi_get()
};
struct CheckResult {
  bool ready = false;
  bool more = false;  // a big one, looked at in slices: call continue_check()
};
struct QueuePopResult : Refusable {
  std::int64_t length = 0;  // elements before the pop
  BlobPtr value;            // the popped element (null when the queue was empty)
};
struct ListKeysResult : Refusable {
  std::vector<std::string> keys;  // unordered
};
// WAIT and MULTI_SET may run in slices: `more` means "call continue_request() with the same arguments
// (kept alive and unchanged) after letting other connections run".
struct WaitResult : Refusable {
  bool ready = false;  // every key is present: answer now; else registered, woken later (server only)
  bool more = false;
};
struct MultiSetResult : Refusable {
  bool more = false;
};
struct BarrierResult : Refusable {
  std::int64_t count = 0;  // arrivals so far, this one included
  bool reached = false;    // count >= world_size
};

class Keyspace {
 public:
  // max_reply_bytes: the most unread reply bytes one connection may hold; a reply that would pass it is
  // refused before it is built.
  Keyspace(KeyspaceEvents& events, std::uint64_t max_total_bytes, std::uint64_t max_reply_bytes = 256ull << 20)
      : events_(events), max_total_bytes_(max_total_bytes), max_reply_bytes_(max_reply_bytes) {}

  // ---- the commands (conn: the requester; kLocalConn for in-process stores) ----
  SetResult set(ConnId conn, const std::string& key, std::string_view value);  // wakes waiters, notifies watchers
  SetResult append(ConnId conn, const std::string& key, std::string_view value);
  // PyTorch's three cases: present and equal to expected -> desired stored; missing and expected empty ->
  // created with desired (waking waiters, as libuv); missing and expected non-empty -> nothing, `expected` back.
  CompareSetResult compare_set(ConnId conn, const std::string& key, std::string_view expected,
                               std::string_view desired);
  GetResult get(ConnId conn, const std::string& key);  // the reply budget is checked on the value's size
  AddResult add(ConnId conn, const std::string& key, std::int64_t delta);  // refuses non-integers, overflow
  bool check(const std::vector<std::string>& keys) const;                  // non-empty queues count
  // The server's CHECK: more than kSliceKeys keys are looked at in slices (a key deleted between slices
  // may still count as present: a CHECK of that size is not atomic).
  CheckResult check(ConnId conn, const std::vector<std::string>& keys);
  // Registers a wait for conn on the missing keys when `register_wait` (the server); in-process stores
  // pass false and wait on their own condition, asking check().
  WaitResult wait(ConnId conn, const std::vector<std::string>& keys, bool register_waiter = true);
  bool delete_key(const std::string& key);  // never wakes waiters (as PyTorch)
  // More than kSliceKeys keys are gathered in slices (each value as it is when its slice runs; the values
  // gathered are held, and counted, until the reply is written); the budgets are checked before any is sent.
  MultiGetResult multi_get(ConnId conn, const std::vector<std::string>& keys);
  // ctrun's PEEK: the value of each key, `absent` for a missing one (never refused for that), in one reply that
  // shares the values as MULTI_GET's does. A PEEK names at most protocol::kMaxPeekKeys keys: no slices.
  MultiGetResult peek(ConnId conn, const std::vector<std::string>& keys, std::string_view absent);
  MultiSetResult multi_set(ConnId conn, const std::vector<std::string>& keys, const std::vector<std::string>& values);
  SetResult queue_push(ConnId conn, const std::string& key, std::string_view value);  // wakes one waiter
  QueuePopResult queue_pop(ConnId conn, const std::string& key);
  std::int64_t queue_len(const std::string& key) const;
  ListKeysResult list_keys(ConnId conn);
  // One arrival: the counter at key goes up by one; earlier arrivals are released when it reaches
  // world_size. With register_wait, conn (when not reached) is registered to be released with STOP_WAITING.
  BarrierResult barrier(ConnId conn, const std::string& key, std::int64_t world_size, bool register_waiter = true);
  SetResult watch(ConnId conn, const std::string& key);  // 1.13 WATCH_KEY
  // ctrun's ON_CLOSE: when conn goes (forget), APPEND value to key. `enable` false cancels conn's registration of
  // key. Returns how many registrations conn holds afterwards (in `count`). The registration's bytes are counted.
  struct OnCloseResult : Refusable {
    std::int64_t count = 0;
  };
  OnCloseResult on_close(ConnId conn, const std::string& key, std::string_view value, bool enable);
  // ctrun's ON_SILENCE: when conn has said nothing for `timeout` (the server tells: quiet()), APPEND `silent` to key,
  // once; when it speaks again (spoke()), APPEND `back` and re-arm. A zero timeout cancels conn's registration of key.
  // Returns how many conn holds afterwards. The registration's bytes are counted.
  OnCloseResult on_silence(ConnId conn, const std::string& key, std::string_view silent, std::string_view back,
                           std::chrono::milliseconds timeout);
  // conn has said nothing for `quiet`: its registrations whose timeout passed fire. True if any did.
  bool quiet(ConnId conn, std::chrono::milliseconds quiet);
  // conn spoke after a silence fired: those registrations append their `back` value and re-arm.
  void spoke(ConnId conn);
  // Ends conn's pending wait, if any (CANCEL_WAIT, or any new request of a client that stopped waiting).
  void cancel_wait(ConnId conn) { drop_wait(conn); }
  // Continue a WAIT, MULTI_SET, CHECK or MULTI_GET that returned `more`.
  CheckResult continue_check(ConnId conn, const std::vector<std::string>& keys) { return check_slice(conn, keys); }
  MultiGetResult continue_multi_get(ConnId conn, const std::vector<std::string>& keys) {
    return multi_get_slice(conn, keys);
  }
  WaitResult continue_wait(ConnId conn, const std::vector<std::string>& keys) { return wait_slice(conn, keys); }
  MultiSetResult continue_multi_set(ConnId conn, const std::vector<std::string>& keys,
                                    const std::vector<std::string>& values) {
    return multi_set_slice(conn, keys, values);
  }

  // Removes a slice of stale wait entries left by big waits that ended; true while more remain.
  bool cleanup_step();
  bool has_cleanup() const { return !cleanup_.empty(); }

  // The connection is gone: drop its pending wait and its watches, and run its ON_CLOSE appends.
  void forget(ConnId conn);

  // Drops every key, queue and pending wait (the agent's fresh keyspace per attempt). Waiters are not
  // answered: their keys did not appear, and their clients time out and cancel as usual. 1.13 watch
  // registrations belong to connections, not to the keyspace, and stay.
  void clear();

  // The owner's view (the embedded server's owner, FileStore's log writer).
  std::optional<std::string> value(const std::string& key) const;
  std::vector<std::string> keys() const;  // sorted
  // Queue elements in order (FileStore persists them).
  std::vector<std::string> queue_elements(const std::string& key) const;

  std::uint64_t num_keys() const { return data_.size(); }
  std::uint64_t bytes() const { return bytes_; }
  // Everything counted against max_total_bytes except the server's I/O buffers: keys, values, queue
  // elements, wait and watch registrations, values no longer in the keyspace but still being sent.
  std::uint64_t held_bytes() const {
    return bytes_ + kEntryOverhead * (data_.size() + queues_.size() + queued_) + wait_bytes_ + watch_bytes_ +
           on_close_bytes_ + on_silence_bytes_ + *orphaned_;
  }
  std::uint64_t pending_waits() const { return waits_.size(); }

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
    std::vector<BlobPtr> gathered;              // MULTI_GET: the values so far
    std::uint64_t total = 0, copied = 0;        // MULTI_GET: reply bytes, and those copied (not shared)
  };
  // A big ended wait's entries still in waiters_, removed a slice at a time.
  struct Cleanup {
    std::vector<std::string> keys;
    std::size_t pos = 0;
    ConnId conn = 0;
    std::uint64_t gen = 0;
    std::uint64_t cost = 0;  // still counted in wait_bytes_ until done
  };
  WaitResult wait_slice(ConnId conn, const std::vector<std::string>& keys);
  MultiSetResult multi_set_slice(ConnId conn, const std::vector<std::string>& keys,
                                 const std::vector<std::string>& values);
  void too_big(Refusable& res, const char* what) const;  // refused: the memory limit
  CheckResult check_slice(ConnId conn, const std::vector<std::string>& keys);
  MultiGetResult multi_get_slice(ConnId conn, const std::vector<std::string>& keys);
  // The reply budget and memory checks of a MULTI_GET whose values are gathered.
  MultiGetResult finish_multi_get(ConnId conn, std::vector<BlobPtr> values, std::uint64_t total, std::uint64_t copied,
                                  const std::string* missing_key, const char* what = "MULTI_GET");
  void unregister_entries(const std::vector<std::string>& keys, std::size_t from, std::size_t to, ConnId conn,
                          std::uint64_t gen);

  bool present(const std::string& key) const;
  bool fits(std::uint64_t growth, ConnId conn);
  // False with res refused (kReplyBudget, "WHAT: ...") when conn's unread replies would pass the limit.
  bool reply_fits(ConnId conn, std::uint64_t reply_bytes, Refusable& res, const char* what) const;
  void retire(BlobPtr& b);    // the keyspace lets go of a value
  void release(ConnId conn);  // a pending WAIT or BARRIER is over: the owner is told
  void register_wait(ConnId conn, std::vector<std::string> missing, bool barrier, std::uint64_t cost);
  void drop_wait(ConnId conn);
  // A key appeared or changed: every waiter on it counts it; those with nothing left get STOP_WAITING.
  void wake_all(const std::string& key, bool include_barrier = true);
  // A queue element arrived: wake at most one waiter on the key (queue semantics: one consumer per item).
  void wake_one(const std::string& key);
  void notify_watchers(const std::string& key, KeyChange change, const BlobPtr& old_value, const BlobPtr& new_value);
  void store(const std::string& key, std::string value);  // SET semantics: store, wake, notify
  void put_value(const std::string& key, BlobPtr value);  // stores without waking (accounting only)

  KeyspaceEvents& events_;
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
  std::unordered_map<std::string, std::vector<Waiter>> waiters_;  // key -> connections waiting on it
  std::unordered_map<ConnId, Slicing> slicing_;
  std::deque<Cleanup> cleanup_;
  std::uint64_t next_gen_ = 1;
  std::unordered_map<ConnId, WaitRegistration> waits_;             // at most one pending wait per connection
  std::unordered_map<std::string, std::vector<ConnId>> watchers_;  // 1.13 WATCH_KEY
  std::unordered_map<ConnId, std::vector<std::string>> watched_by_;
  std::unordered_map<ConnId, std::unordered_map<std::string, std::string>> on_close_;  // conn -> key -> value
  std::uint64_t on_close_bytes_ = 0;
  struct OnSilence {
    std::string silent, back;
    std::chrono::milliseconds timeout{0};
    bool fired = false;
  };
  std::unordered_map<ConnId, std::unordered_map<std::string, OnSilence>> on_silence_;  // conn -> key -> values
  std::uint64_t on_silence_bytes_ = 0;
};

}  // namespace ctrun::store::detail
