#include "store/server_keyspace.hpp"

#include <algorithm>
#include <cstdint>

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

}  // namespace

bool Keyspace::present(const std::string& key) const {
  if (data_.count(key)) return true;
  // As PyTorch's libuv server: a non-empty queue makes its key "exist" for CHECK and WAIT, so that
  // queue_pop(block=True), which WAITs first, wakes up when an element arrives.
  auto q = queues_.find(key);
  return q != queues_.end() && !q->second.empty();
}

bool Keyspace::fits(std::uint64_t growth) const { return bytes_ + io_bytes_ + growth <= max_total_bytes_; }

void Keyspace::reply_u8(ConnId conn, std::uint8_t v) {
  if (auto* out = sink_.output(conn)) protocol::put_u8(*out, v);
}

void Keyspace::register_wait(ConnId conn, std::vector<std::string> missing, bool barrier) {
  for (const auto& k : missing) waiters_[k].push_back(conn);
  auto& reg = waits_[conn];
  reg.remaining = missing.size();
  reg.keys = std::move(missing);
  reg.barrier = barrier;
}

void Keyspace::drop_wait(ConnId conn) {
  auto it = waits_.find(conn);
  if (it == waits_.end()) return;
  for (const auto& k : it->second.keys) {
    auto w = waiters_.find(k);
    if (w == waiters_.end()) continue;
    erase_one(w->second, conn);
    if (w->second.empty()) waiters_.erase(w);
  }
  waits_.erase(it);
}

void Keyspace::wake_all(const std::string& key, bool include_barrier) {
  auto w = waiters_.find(key);
  if (w == waiters_.end()) return;
  std::vector<ConnId> keep;
  for (ConnId c : w->second) {
    auto reg = waits_.find(c);
    if (reg == waits_.end()) continue;
    if (reg->second.barrier && !include_barrier) {
      keep.push_back(c);
      continue;
    }
    if (--reg->second.remaining == 0) {
      // Done: unregister from the other keys' lists too (they all appeared already, so those lists no
      // longer hold this connection, except this key's, which is being consumed).
      waits_.erase(reg);
      reply_u8(c, u8(WaitResponse::kStopWaiting));
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
    auto reg = waits_.find(list[i]);
    if (reg == waits_.end()) {
      list.erase(list.begin() + static_cast<std::ptrdiff_t>(i));  // stale entry
      continue;
    }
    if (reg->second.barrier) {  // barrier arrivals wait for the count, not for queue elements
      ++i;
      continue;
    }
    const ConnId c = list[i];
    list.erase(list.begin() + static_cast<std::ptrdiff_t>(i));
    if (--reg->second.remaining == 0) {
      waits_.erase(reg);
      reply_u8(c, u8(WaitResponse::kStopWaiting));
    }
    break;
  }
  if (list.empty()) waiters_.erase(w);
}

void Keyspace::notify_watchers(const std::string& key, WatchResponse type, std::string_view old_value,
                               std::string_view new_value) {
  auto w = watchers_.find(key);
  if (w == watchers_.end()) return;
  // 1.13's event: u8 type, key, old value, new value (TCPStoreMasterDaemon::sendKeyUpdatesToClients).
  for (ConnId c : w->second) {
    if (auto* out = sink_.output(c)) {
      protocol::put_u8(*out, static_cast<std::uint8_t>(type));
      protocol::put_bytes(*out, key);
      protocol::put_bytes(*out, old_value);
      protocol::put_bytes(*out, new_value);
    }
  }
}

void Keyspace::store(const std::string& key, std::string value) {
  auto it = data_.find(key);
  const bool created = it == data_.end();
  std::string old;
  if (created) {
    bytes_ += key.size() + value.size();
    it = data_.emplace(key, std::move(value)).first;
  } else {
    bytes_ = bytes_ - it->second.size() + value.size();
    if (!watchers_.empty()) old = it->second;
    it->second = std::move(value);
  }
  wake_all(key);
  if (!watchers_.empty())
    notify_watchers(key, created ? WatchResponse::kKeyCreated : WatchResponse::kKeyUpdated, old, it->second);
}

ExecResult Keyspace::execute(ConnId conn, const protocol::Request& r) {
  ++ops_[static_cast<std::size_t>(r.command)];
  // A new request while a WAIT is still registered means the client stopped waiting: torch 1.13 times
  // out silently (no CANCEL_WAIT) and carries on. A real 1.13 server keeps the registration and later
  // writes a stray 00 that desynchronises the client; we drop it here instead, which is what the client
  // expects. CANCEL_WAIT handles its own registration (and must still reply 01).
  if (r.command != Command::kCancelWait && r.command != Command::kValidate) drop_wait(conn);
  std::string* out = sink_.output(conn);
  if (!out) return {};
  auto too_big = [&] {
    return ExecResult{true, fmt::format("{} would exceed the store's memory limit of {} bytes",
                                        protocol::command_name(r.command), max_total_bytes_)};
  };

  switch (r.command) {
    case Command::kValidate:
      if (r.u32 != protocol::kValidationMagic) return {true, fmt::format("VALIDATE with wrong magic 0x{:08X}", r.u32)};
      return {};

    case Command::kSet:
    case Command::kAppend: {
      const auto& key = r.keys[0];
      auto it = data_.find(key);
      std::uint64_t growth = r.values[0].size() + (it == data_.end() ? key.size() : 0);
      if (r.command == Command::kSet && it != data_.end())
        growth = r.values[0].size() > it->second.size() ? r.values[0].size() - it->second.size() : 0;
      if (!fits(growth)) return too_big();
      if (r.command == Command::kSet || it == data_.end()) {
        store(key, r.values[0]);
      } else {
        std::string old = watchers_.empty() ? std::string() : it->second;
        it->second += r.values[0];
        bytes_ += r.values[0].size();
        wake_all(key);
        notify_watchers(key, WatchResponse::kKeyUpdated, old, it->second);
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
          protocol::put_bytes(*out, expected);
          return {};
        }
        if (!fits(key.size() + desired.size())) return too_big();
        store(key, desired);  // wakes waiters, as the libuv server (the legacy one does not)
        protocol::put_bytes(*out, desired);
        return {};
      }
      if (it->second == expected) {
        if (!fits(desired.size())) return too_big();
        store(key, desired);
        it = data_.find(key);
      }
      protocol::put_bytes(*out, it->second);
      return {};
    }

    case Command::kGet: {
      auto it = data_.find(r.keys[0]);
      // Both legacy servers (1.13 and 2.x) fail a GET of a missing key by closing the connection (libuv
      // would send an empty value). Real clients always WAIT first, and the captures expect the close.
      if (it == data_.end()) return {true, fmt::format("GET of missing key '{}'", printable_key(r.keys[0]))};
      protocol::put_bytes(*out, it->second);
      return {};
    }

    case Command::kAdd: {
      const auto& key = r.keys[0];
      std::int64_t value = r.integer;
      auto it = data_.find(key);
      if (it != data_.end()) {
        auto current = parse_stoll(it->second);
        if (!current)
          return {true, fmt::format("ADD on key '{}' whose value '{}' is not a decimal integer", printable_key(key),
                                    printable_key(it->second, 40))};
        if (__builtin_add_overflow(*current, r.integer, &value))
          return {true, fmt::format("ADD on key '{}' overflows int64", printable_key(key))};
      }
      std::string text = std::to_string(value);
      if (!fits(key.size() + text.size())) return too_big();
      protocol::put_i64(*out, value);  // the reply goes before any wake-up (the requester's order)
      store(key, std::move(text));
      return {};
    }

    case Command::kCheck: {
      bool all = std::all_of(r.keys.begin(), r.keys.end(), [&](const std::string& k) { return present(k); });
      protocol::put_u8(
          *out, static_cast<std::uint8_t>(all ? protocol::CheckResponse::kReady : protocol::CheckResponse::kNotReady));
      return {};
    }

    case Command::kWait: {
      std::vector<std::string> missing;
      for (const auto& k : r.keys)
        if (!present(k) && std::find(missing.begin(), missing.end(), k) == missing.end()) missing.push_back(k);
      if (missing.empty())
        protocol::put_u8(*out, u8(WaitResponse::kStopWaiting));
      else
        register_wait(conn, std::move(missing), false);  // answered later with exactly one 00
      return {};
    }

    case Command::kGetNumKeys:
      protocol::put_i64(*out, static_cast<std::int64_t>(data_.size()));
      return {};

    case Command::kWatchKey: {
      auto& list = watchers_[r.keys[0]];
      if (std::find(list.begin(), list.end(), conn) == list.end()) {
        list.push_back(conn);
        watched_by_[conn].push_back(r.keys[0]);
      }
      protocol::put_u8(*out, static_cast<std::uint8_t>(WatchResponse::kCallbackRegistered));
      return {};
    }

    case Command::kDeleteKey: {
      auto it = data_.find(r.keys[0]);
      std::int64_t erased = 0;
      if (it != data_.end()) {
        notify_watchers(r.keys[0], WatchResponse::kKeyDeleted, it->second, {});
        bytes_ -= it->first.size() + it->second.size();
        data_.erase(it);
        erased = 1;
      }
      protocol::put_i64(*out, erased);  // deleting never wakes waiters (as PyTorch)
      return {};
    }

    case Command::kMultiGet: {
      std::uint64_t total = 0;
      for (const auto& k : r.keys) {
        auto it = data_.find(k);
        if (it == data_.end()) break;
        total += 8 + it->second.size();
      }
      // The reply is held in memory until the client reads it: the same key asked 128K times must not be
      // able to build a reply of 128K values.
      if (!fits(total)) return too_big();
      out->reserve(out->size() + total);
      for (const auto& k : r.keys) {
        auto it = data_.find(k);
        // As the legacy servers: the values before the missing key go out, then the connection closes.
        if (it == data_.end()) return {true, fmt::format("MULTI_GET of missing key '{}'", printable_key(k))};
        protocol::put_bytes(*out, it->second);
      }
      return {};
    }

    case Command::kMultiSet: {
      std::uint64_t growth = 0;
      for (std::size_t i = 0; i < r.keys.size(); ++i) growth += r.keys[i].size() + r.values[i].size();
      if (!fits(growth)) return too_big();
      for (std::size_t i = 0; i < r.keys.size(); ++i) store(r.keys[i], r.values[i]);
      return {};
    }

    case Command::kCancelWait:
      drop_wait(conn);
      // Replied even when nothing was pending (torch26_ops conn3). If the wait had already been answered,
      // the client reads that 00 first and then this 01, as torch's client expects.
      protocol::put_u8(*out, u8(WaitResponse::kWaitCanceled));
      return {};

    case Command::kPing:
      protocol::put_u32(*out, r.u32);
      return {};

    case Command::kQueuePush: {
      const auto& key = r.keys[0];
      auto q = queues_.find(key);
      std::uint64_t growth = r.values[0].size() + (q == queues_.end() ? key.size() : 0);
      if (!fits(growth)) return too_big();
      if (q == queues_.end()) q = queues_.emplace(key, std::deque<std::string>{}).first;
      q->second.push_back(r.values[0]);
      bytes_ += growth;
      wake_one(key);
      return {};
    }

    case Command::kQueuePop: {
      auto q = queues_.find(r.keys[0]);
      std::int64_t len = q == queues_.end() ? 0 : static_cast<std::int64_t>(q->second.size());
      protocol::put_i64(*out, len);
      if (len > 0) {
        protocol::put_bytes(*out, q->second.front());
        bytes_ -= q->second.front().size();
        q->second.pop_front();
        if (q->second.empty()) {
          bytes_ -= q->first.size();
          queues_.erase(q);
        }
      }
      return {};
    }

    case Command::kQueueLen: {
      auto q = queues_.find(r.keys[0]);
      protocol::put_i64(*out, q == queues_.end() ? 0 : static_cast<std::int64_t>(q->second.size()));
      return {};
    }

    case Command::kListKeys: {
      protocol::put_i64(*out, static_cast<std::int64_t>(data_.size()));
      for (const auto& [k, v] : data_) protocol::put_bytes(*out, k);
      return {};
    }

    case Command::kBarrier: {
      const auto& key = r.keys[0];
      std::int64_t count = 1;
      auto it = data_.find(key);
      if (it != data_.end()) {
        auto current = parse_stoll(it->second);
        if (!current || *current == INT64_MAX)
          return {true, fmt::format("BARRIER on key '{}' whose value is not a counter", printable_key(key))};
        count = *current + 1;
      }
      std::string text = std::to_string(count);
      if (!fits(key.size() + text.size())) return too_big();
      const bool reached = count >= r.integer;
      if (reached) protocol::put_u8(*out, u8(WaitResponse::kStopWaiting));
      // Storing the counter wakes plain WAITers on the key; earlier barrier arrivals only when it is reached.
      auto existed = data_.find(key);
      if (existed == data_.end()) {
        bytes_ += key.size() + text.size();
        data_.emplace(key, text);
      } else {
        bytes_ = bytes_ - existed->second.size() + text.size();
        existed->second = text;
      }
      wake_all(key, reached);
      if (!reached) register_wait(conn, {key}, true);
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
    auto it = watchers_.find(k);
    if (it == watchers_.end()) continue;
    erase_one(it->second, conn);
    if (it->second.empty()) watchers_.erase(it);
  }
  watched_by_.erase(w);
}

void Keyspace::clear() {
  data_.clear();
  queues_.clear();
  waiters_.clear();
  waits_.clear();
  bytes_ = 0;
}

std::optional<std::string> Keyspace::get(const std::string& key) const {
  auto it = data_.find(key);
  if (it == data_.end()) return std::nullopt;
  return it->second;
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
