#include "store/server_keyspace.hpp"

#include <algorithm>
#include <cstdint>
#include <unordered_set>

#include <fmt/format.h>

#include "store/store_util.hpp"

namespace ctrun::store::detail {

using protocol::Command;
using protocol::WaitResponse;
using protocol::WatchResponse;

namespace {

std::uint8_t u8(WaitResponse r) { return static_cast<std::uint8_t>(r); }

void erase_one(std::vector<ConnId>& v, ConnId c) {
  auto it = std::find(v.begin(), v.end(), c);
  if (it != v.end()) v.erase(it);
}

std::uint64_t entry_cost(std::size_t key, std::size_t value) { return key + value + kEntryOverhead; }

// An empty value for events about a missing side (the old value of a created key, the new one of a delete).
const BlobPtr& empty_blob() {
  static const BlobPtr b = std::make_shared<Blob>(std::string());
  return b;
}

}  // namespace

bool Keyspace::present(const std::string& key) const {
  if (data_.count(key)) return true;
  // As PyTorch's libuv server: a non-empty queue makes its key "exist" for CHECK and WAIT, so that
  // queue_pop(block=True), which WAITs first, wakes up when an element arrives.
  auto q = queues_.find(key);
  return q != queues_.end() && !q->second.empty();
}

bool Keyspace::fits(std::uint64_t growth, ConnId conn) {
  auto ok = [&] { return held_bytes() + io_bytes_ + growth <= max_total_bytes_; };
  if (ok()) return true;
  // Unread replies of clients that do not read may be what fills the memory: they go first, so that a
  // legitimate writer is not refused because of them.
  while (!ok() && sink_.reclaim(held_bytes() + io_bytes_ + growth - max_total_bytes_, conn)) {
  }
  return ok();
}

bool Keyspace::reply_fits(ConnId conn, std::uint64_t reply_bytes, std::string& why) const {
  ReplyBuffer* out = sink_.output(conn);
  const std::uint64_t pending = out ? out->size() : 0;
  if (pending + reply_bytes <= max_reply_bytes_) return true;
  why = fmt::format(
      "its reply of {} bytes (plus {} unread) would exceed the limit of {} bytes of unread replies per "
      "connection (--max-pending-bytes)",
      reply_bytes, pending, max_reply_bytes_);
  return false;
}

void Keyspace::retire(BlobPtr& b) {
  if (b && b.use_count() > 1 && !b->orphaned) {
    b->orphaned = orphaned_;
    *orphaned_ += b->bytes.size();
  }
  b.reset();
}

void Keyspace::reply_u8(ConnId conn, std::uint8_t v) {
  if (auto* out = sink_.output(conn)) out->u8(v);
}

void Keyspace::register_wait(ConnId conn, std::vector<std::string> missing, bool barrier, std::uint64_t cost) {
  const std::uint64_t gen = next_gen_++;
  for (const auto& k : missing) waiters_[k].push_back({conn, gen});
  auto& reg = waits_[conn];
  reg.remaining = missing.size();
  reg.keys = std::move(missing);
  reg.barrier = barrier;
  reg.cost = cost;
  reg.gen = gen;
  wait_bytes_ += cost;
}

void Keyspace::unregister_entries(const std::vector<std::string>& keys, std::size_t from, std::size_t to,
                                  ConnId conn, std::uint64_t gen) {
  for (std::size_t i = from; i < to; ++i) {
    auto w = waiters_.find(keys[i]);
    if (w == waiters_.end()) continue;
    auto& list = w->second;
    auto it = std::find_if(list.begin(), list.end(), [&](const Waiter& x) { return x.conn == conn && x.gen == gen; });
    if (it != list.end()) list.erase(it);
    if (list.empty()) waiters_.erase(w);
  }
}

void Keyspace::drop_wait(ConnId conn) {
  slicing_.erase(conn);
  auto it = waits_.find(conn);
  if (it == waits_.end()) return;
  auto& reg = it->second;
  if (reg.keys.size() <= kSliceKeys) {
    unregister_entries(reg.keys, 0, reg.keys.size(), conn, reg.gen);
    wait_bytes_ -= reg.cost;
  } else {
    // A big wait's entries go a slice at a time (cleanup_step); until then they are stale (their generation
    // no longer matches a registration), ignored by wake-ups, and still counted.
    cleanup_.push_back(Cleanup{std::move(reg.keys), 0, conn, reg.gen, reg.cost});
  }
  waits_.erase(it);
}

bool Keyspace::cleanup_step() {
  std::size_t budget = kSliceKeys;
  while (!cleanup_.empty() && budget > 0) {
    auto& c = cleanup_.front();
    const std::size_t to = std::min(c.keys.size(), c.pos + budget);
    unregister_entries(c.keys, c.pos, to, c.conn, c.gen);
    budget -= to - c.pos;
    c.pos = to;
    if (c.pos == c.keys.size()) {
      wait_bytes_ -= c.cost;
      cleanup_.pop_front();
    }
  }
  return !cleanup_.empty();
}

void Keyspace::wake_all(const std::string& key, bool include_barrier) {
  auto w = waiters_.find(key);
  if (w == waiters_.end()) return;
  std::vector<Waiter> keep;
  for (const Waiter& x : w->second) {
    auto reg = waits_.find(x.conn);
    if (reg == waits_.end() || reg->second.gen != x.gen) continue;  // stale: that wait ended
    if (reg->second.barrier && !include_barrier) {
      keep.push_back(x);
      continue;
    }
    if (--reg->second.remaining == 0 && !reg->second.registering) {
      // Done: unregister from the other keys' lists too (they all appeared already, so those lists no
      // longer hold this connection, except this key's, which is being consumed).
      wait_bytes_ -= reg->second.cost;
      waits_.erase(reg);
      reply_u8(x.conn, u8(WaitResponse::kStopWaiting));
    }
  }
  if (keep.empty())
    waiters_.erase(w);
  else
    w->second = std::move(keep);
}

void Keyspace::wake_one(const std::string& key) {
  auto w = waiters_.find(key);
  if (w == waiters_.end()) return;
  auto& list = w->second;
  for (std::size_t i = 0; i < list.size();) {
    auto reg = waits_.find(list[i].conn);
    if (reg == waits_.end() || reg->second.gen != list[i].gen) {
      list.erase(list.begin() + static_cast<std::ptrdiff_t>(i));  // stale entry
      continue;
    }
    if (reg->second.barrier) {  // barrier arrivals wait for the count, not for queue elements
      ++i;
      continue;
    }
    const ConnId c = list[i].conn;
    list.erase(list.begin() + static_cast<std::ptrdiff_t>(i));
    if (--reg->second.remaining == 0 && !reg->second.registering) {
      wait_bytes_ -= reg->second.cost;
      waits_.erase(reg);
      reply_u8(c, u8(WaitResponse::kStopWaiting));
    }
    break;
  }
  if (list.empty()) waiters_.erase(w);
}

// A big WAIT, kSliceKeys keys at a time. The registration exists from the first slice on (registering), so
// a key set between slices counts; it is answered only after the last slice, if nothing is missing.
ExecResult Keyspace::wait_slice(ConnId conn, const protocol::Request& r) {
  auto& sl = slicing_[conn];
  auto reg = waits_.find(conn);
  if (reg == waits_.end()) {
    WaitRegistration fresh;
    fresh.gen = next_gen_++;
    fresh.registering = true;
    fresh.cost = kEntryOverhead;
    if (!fits(fresh.cost, conn)) {
      slicing_.erase(conn);
      return {true, fmt::format("WAIT would exceed the server's memory limit of {} bytes (--max-total-bytes)",
                                max_total_bytes_)};
    }
    wait_bytes_ += fresh.cost;
    reg = waits_.emplace(conn, std::move(fresh)).first;
  }
  auto& w = reg->second;
  const std::size_t to = std::min(r.keys.size(), sl.pos + kSliceKeys);
  std::uint64_t cost = 0;
  for (std::size_t i = sl.pos; i < to; ++i)
    if (!present(r.keys[i]) && !sl.seen.count(r.keys[i])) cost += r.keys[i].size() + kEntryOverhead;
  if (!fits(cost, conn)) {
    drop_wait(conn);
    return {true, fmt::format("WAIT would exceed the server's memory limit of {} bytes (--max-total-bytes)",
                              max_total_bytes_)};
  }
  for (std::size_t i = sl.pos; i < to; ++i) {
    const auto& k = r.keys[i];
    if (present(k) || !sl.seen.insert(k).second) continue;
    waiters_[k].push_back({conn, w.gen});
    w.keys.push_back(k);
    ++w.remaining;
  }
  w.cost += cost;
  wait_bytes_ += cost;
  sl.pos = to;
  if (to < r.keys.size()) return {.more = true};
  slicing_.erase(conn);
  w.registering = false;
  if (w.remaining == 0) {
    // Everything is there (or appeared meanwhile): answer now; leftover entries are stale.
    drop_wait(conn);
    reply_u8(conn, u8(WaitResponse::kStopWaiting));
  }
  return {};
}

// A big MULTI_SET (already checked against the memory limit as a whole), kSliceKeys keys at a time.
ExecResult Keyspace::multi_set_slice(ConnId conn, const protocol::Request& r) {
  auto& sl = slicing_[conn];
  const std::size_t to = std::min(r.keys.size(), sl.pos + kSliceKeys);
  for (std::size_t i = sl.pos; i < to; ++i) store(r.keys[i], r.values[i]);
  sl.pos = to;
  if (to < r.keys.size()) return {.more = true};
  slicing_.erase(conn);
  return {};
}

ExecResult Keyspace::step(ConnId conn, const protocol::Request& r) {
  if (r.command == Command::kWait) return wait_slice(conn, r);
  if (r.command == Command::kMultiSet) return multi_set_slice(conn, r);
  return {};
}

void Keyspace::notify_watchers(const std::string& key, WatchResponse type, const BlobPtr& old_value,
                               const BlobPtr& new_value) {
  auto w = watchers_.find(key);
  if (w == watchers_.end()) return;
  // 1.13's event: u8 type, key, old value, new value (TCPStoreMasterDaemon::sendKeyUpdatesToClients).
  // The values are shared by every watcher's reply, not copied per watcher.
  for (ConnId c : w->second) {
    if (auto* out = sink_.output(c)) {
      out->u8(static_cast<std::uint8_t>(type));
      out->bytes(key);
      out->value(old_value ? old_value : empty_blob());
      out->value(new_value ? new_value : empty_blob());
    }
  }
}

void Keyspace::put_value(const std::string& key, BlobPtr value) {
  auto it = data_.find(key);
  if (it == data_.end()) {
    bytes_ += key.size() + value->bytes.size();
    data_.emplace(key, std::move(value));
  } else {
    bytes_ = bytes_ - it->second->bytes.size() + value->bytes.size();
    retire(it->second);
    it->second = std::move(value);
  }
}

void Keyspace::store(const std::string& key, std::string value) {
  auto it = data_.find(key);
  const bool created = it == data_.end();
  BlobPtr old = created || watchers_.empty() ? nullptr : it->second;
  put_value(key, std::make_shared<Blob>(std::move(value)));
  wake_all(key);
  if (!watchers_.empty()) {
    // (put_value counted `old` as orphaned since this function holds it; the count drops when the last
    // holder, this function or a watcher's reply, lets go.)
    notify_watchers(key, created ? WatchResponse::kKeyCreated : WatchResponse::kKeyUpdated, old, data_[key]);
  }
}

ExecResult Keyspace::execute(ConnId conn, const protocol::Request& r) {
  ++ops_[static_cast<std::size_t>(r.command)];
  // A new request while a WAIT is still registered means the client stopped waiting: torch 1.13 times
  // out silently (no CANCEL_WAIT) and carries on. A real 1.13 server keeps the registration and later
  // writes a stray 00 that desynchronises the client; we drop it here instead, which is what the client
  // expects. CANCEL_WAIT handles its own registration (and must still reply 01).
  if (r.command != Command::kCancelWait && r.command != Command::kValidate) drop_wait(conn);
  ReplyBuffer* out = sink_.output(conn);
  if (!out) return {};
  auto too_big = [&] {
    return ExecResult{true, fmt::format("{} would exceed the server's memory limit of {} bytes (--max-total-bytes)",
                                        protocol::command_name(r.command), max_total_bytes_)};
  };
  std::string why;

  switch (r.command) {
    case Command::kValidate:
      if (r.u32 != protocol::kValidationMagic) return {true, fmt::format("VALIDATE with wrong magic 0x{:08X}", r.u32)};
      return {};

    case Command::kSet:
    case Command::kAppend: {
      const auto& key = r.keys[0];
      auto it = data_.find(key);
      std::uint64_t growth = it == data_.end() ? entry_cost(key.size(), r.values[0].size()) : r.values[0].size();
      if (r.command == Command::kSet && it != data_.end())
        growth = r.values[0].size() > it->second->bytes.size() ? r.values[0].size() - it->second->bytes.size() : 0;
      if (!fits(growth, conn)) return too_big();
      if (r.command == Command::kSet || it == data_.end()) {
        store(key, r.values[0]);
      } else {
        BlobPtr old = it->second;
        if (old.use_count() > 2 || !watchers_.empty()) {
          // Replies (or watch events about to be sent) hold the current bytes: copy on write.
          put_value(key, std::make_shared<Blob>(old->bytes + r.values[0]));
        } else {
          old->bytes += r.values[0];
          bytes_ += r.values[0].size();
        }
        wake_all(key);
        notify_watchers(key, WatchResponse::kKeyUpdated, old, data_[key]);
      }
      return {};
    }

    case Command::kCompareSet: {
      const auto& key = r.keys[0];
      const auto& expected = r.values[0];
      const auto& desired = r.values[1];
      auto it = data_.find(key);
      if (it == data_.end()) {
        if (!expected.empty()) {
          // PyTorch "lies" here: nothing is stored and the caller gets its own expected value back.
          out->bytes(expected);
          return {};
        }
        if (!fits(entry_cost(key.size(), desired.size()) + desired.size(), conn)) return too_big();
        store(key, desired);  // wakes waiters, as the libuv server (the legacy one does not)
        out->value(data_[key]);
        return {};
      }
      if (it->second->bytes == expected) {
        if (!fits(desired.size(), conn)) return too_big();
        store(key, desired);
      }
      out->value(data_[key]);
      return {};
    }

    case Command::kGet: {
      auto it = data_.find(r.keys[0]);
      // Both legacy servers (1.13 and 2.x) fail a GET of a missing key by closing the connection (libuv
      // would send an empty value). Real clients always WAIT first, and the captures expect the close.
      if (it == data_.end()) return {true, fmt::format("GET of missing key '{}'", printable_key(r.keys[0]))};
      if (!reply_fits(conn, 8 + it->second->bytes.size(), why)) return {true, "GET: " + why};
      out->value(it->second);
      return {};
    }

    case Command::kAdd: {
      const auto& key = r.keys[0];
      std::int64_t value = 0;
      auto it = data_.find(key);
      try {
        value = add_result(key, it == data_.end() ? nullptr : &it->second->bytes, r.integer);
      } catch (const StoreError& e) {
        return {true, e.what()};  // no error frame in the protocol: the connection is closed
      }
      std::string text = std::to_string(value);
      if (!fits(entry_cost(key.size(), text.size()), conn)) return too_big();
      out->i64(value);  // the reply goes before any wake-up (the requester's order)
      store(key, std::move(text));
      return {};
    }

    case Command::kCheck: {
      bool all = std::all_of(r.keys.begin(), r.keys.end(), [&](const std::string& k) { return present(k); });
      out->u8(static_cast<std::uint8_t>(all ? protocol::CheckResponse::kReady : protocol::CheckResponse::kNotReady));
      return {};
    }

    case Command::kWait: {
      if (r.keys.size() > kSliceKeys) return wait_slice(conn, r);
      // Linear in the number of keys (a hash set for the duplicates): one WAIT naming 128K keys must not
      // hold the loop for seconds.
      std::vector<std::string> missing;
      std::unordered_set<std::string_view> seen;
      std::uint64_t cost = kEntryOverhead;
      for (const auto& k : r.keys) {
        if (present(k) || !seen.insert(k).second) continue;
        missing.push_back(k);
        cost += k.size() + kEntryOverhead;
      }
      if (missing.empty()) {
        out->u8(u8(WaitResponse::kStopWaiting));
        return {};
      }
      if (!fits(cost, conn)) return too_big();
      register_wait(conn, std::move(missing), false, cost);  // answered later with exactly one 00
      return {};
    }

    case Command::kGetNumKeys:
      out->i64(static_cast<std::int64_t>(data_.size()));
      return {};

    case Command::kWatchKey: {
      auto& list = watchers_[r.keys[0]];
      if (std::find(list.begin(), list.end(), conn) == list.end()) {
        const std::uint64_t cost = r.keys[0].size() + 2 * kEntryOverhead;
        if (!fits(cost, conn)) {
          if (list.empty()) watchers_.erase(r.keys[0]);
          return too_big();
        }
        list.push_back(conn);
        watched_by_[conn].push_back(r.keys[0]);
        watch_bytes_ += cost;
      }
      out->u8(static_cast<std::uint8_t>(WatchResponse::kCallbackRegistered));
      return {};
    }

    case Command::kDeleteKey: {
      auto it = data_.find(r.keys[0]);
      std::int64_t erased = 0;
      if (it != data_.end()) {
        BlobPtr old = std::move(it->second);
        bytes_ -= it->first.size() + old->bytes.size();
        data_.erase(it);
        notify_watchers(r.keys[0], WatchResponse::kKeyDeleted, old, nullptr);
        retire(old);
        erased = 1;
      }
      out->i64(erased);  // deleting never wakes waiters (as PyTorch)
      return {};
    }

    case Command::kMultiGet: {
      // Sized before anything is built: the reply shares the values (one 8 MiB key asked 480 times is
      // one copy), and the per-connection limit on unread replies is checked on its full length.
      std::uint64_t total = 0, copied = 0;
      for (const auto& k : r.keys) {
        auto it = data_.find(k);
        if (it == data_.end()) break;
        const auto n = it->second->bytes.size();
        total += 8 + n;
        copied += 8 + (n < ReplyBuffer::kShareAtLeast ? n : 0);
      }
      if (!reply_fits(conn, total, why)) return {true, "MULTI_GET: " + why};
      if (!fits(copied, conn)) return too_big();
      for (const auto& k : r.keys) {
        auto it = data_.find(k);
        // As the legacy servers: the values before the missing key go out, then the connection closes.
        if (it == data_.end()) return {true, fmt::format("MULTI_GET of missing key '{}'", printable_key(k))};
        out->value(it->second);
      }
      return {};
    }

    case Command::kMultiSet: {
      std::uint64_t growth = 0;
      for (std::size_t i = 0; i < r.keys.size(); ++i) growth += entry_cost(r.keys[i].size(), r.values[i].size());
      if (!fits(growth, conn)) return too_big();
      if (r.keys.size() > kSliceKeys) return multi_set_slice(conn, r);
      for (std::size_t i = 0; i < r.keys.size(); ++i) store(r.keys[i], r.values[i]);
      return {};
    }

    case Command::kCancelWait:
      drop_wait(conn);
      // Replied even when nothing was pending (torch26_ops conn3). If the wait had already been answered,
      // the client reads that 00 first and then this 01, as torch's client expects.
      out->u8(u8(WaitResponse::kWaitCanceled));
      return {};

    case Command::kPing:
      out->u32(r.u32);
      return {};

    case Command::kQueuePush: {
      const auto& key = r.keys[0];
      auto q = queues_.find(key);
      std::uint64_t growth = r.values[0].size() + (q == queues_.end() ? key.size() : 0);
      if (!fits(growth + kEntryOverhead * (q == queues_.end() ? 2 : 1), conn)) return too_big();
      if (q == queues_.end()) q = queues_.emplace(key, std::deque<BlobPtr>{}).first;
      q->second.push_back(std::make_shared<Blob>(r.values[0]));
      bytes_ += growth;
      ++queued_;
      wake_one(key);
      return {};
    }

    case Command::kQueuePop: {
      auto q = queues_.find(r.keys[0]);
      std::int64_t len = q == queues_.end() ? 0 : static_cast<std::int64_t>(q->second.size());
      if (len > 0 && !reply_fits(conn, 16 + q->second.front()->bytes.size(), why))
        return {true, "QUEUE_POP: " + why};
      out->i64(len);
      if (len > 0) {
        BlobPtr front = std::move(q->second.front());
        q->second.pop_front();
        out->value(front);
        bytes_ -= front->bytes.size();
        --queued_;
        retire(front);
        if (q->second.empty()) {
          bytes_ -= q->first.size();
          queues_.erase(q);
        }
      }
      return {};
    }

    case Command::kQueueLen: {
      auto q = queues_.find(r.keys[0]);
      out->i64(q == queues_.end() ? 0 : static_cast<std::int64_t>(q->second.size()));
      return {};
    }

    case Command::kListKeys: {
      std::uint64_t total = 8;
      for (const auto& [k, v] : data_) total += 8 + k.size();
      if (!reply_fits(conn, total, why)) return {true, "LIST_KEYS: " + why};
      if (!fits(total, conn)) return too_big();
      out->i64(static_cast<std::int64_t>(data_.size()));
      for (const auto& [k, v] : data_) out->bytes(k);
      return {};
    }

    case Command::kBarrier: {
      const auto& key = r.keys[0];
      std::int64_t count = 1;
      auto it = data_.find(key);
      if (it != data_.end()) {
        auto current = parse_stoll(it->second->bytes);
        if (!current || *current == INT64_MAX)
          return {true, fmt::format("BARRIER on key '{}' whose value is not a counter", printable_key(key))};
        count = *current + 1;
      }
      std::string text = std::to_string(count);
      const std::uint64_t wait_cost = key.size() + 2 * kEntryOverhead;
      if (!fits(entry_cost(key.size(), text.size()) + wait_cost, conn)) return too_big();
      const bool reached = count >= r.integer;
      if (reached) out->u8(u8(WaitResponse::kStopWaiting));
      // Storing the counter wakes plain WAITers on the key; earlier barrier arrivals only when it is reached.
      put_value(key, std::make_shared<Blob>(std::move(text)));
      wake_all(key, reached);
      if (!reached) register_wait(conn, {key}, true, wait_cost);
      return {};
    }
  }
  return {true, "unhandled command"};
}

void Keyspace::forget(ConnId conn) {
  drop_wait(conn);
  auto w = watched_by_.find(conn);
  if (w == watched_by_.end()) return;
  for (const auto& k : w->second) {
    watch_bytes_ -= k.size() + 2 * kEntryOverhead;
    auto it = watchers_.find(k);
    if (it == watchers_.end()) continue;
    erase_one(it->second, conn);
    if (it->second.empty()) watchers_.erase(it);
  }
  watched_by_.erase(w);
}

void Keyspace::clear() {
  for (auto& [k, v] : data_) retire(v);
  for (auto& [k, q] : queues_)
    for (auto& e : q) retire(e);
  data_.clear();
  queues_.clear();
  waiters_.clear();
  waits_.clear();
  slicing_.clear();
  cleanup_.clear();
  bytes_ = 0;
  queued_ = 0;
  wait_bytes_ = 0;
}

std::optional<std::string> Keyspace::get(const std::string& key) const {
  auto it = data_.find(key);
  if (it == data_.end()) return std::nullopt;
  return it->second->bytes;
}

void Keyspace::set(const std::string& key, std::string value) { store(key, std::move(value)); }

std::vector<std::string> Keyspace::keys() const {
  std::vector<std::string> out;
  out.reserve(data_.size());
  for (const auto& [k, v] : data_) out.push_back(k);
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace ctrun::store::detail
