#include "store/keyspace.hpp"

#include <algorithm>
#include <cstdint>
#include <unordered_set>

#include <fmt/format.h>

#include "store/store_util.hpp"

namespace ctrun::store::detail {

namespace {

void erase_one(std::vector<ConnId>& v, ConnId c) {
  auto it = std::find(v.begin(), v.end(), c);
  if (it != v.end()) v.erase(it);
}

std::uint64_t entry_cost(std::size_t key, std::size_t value) { return key + value + kEntryOverhead; }

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
  while (!ok() && events_.reclaim(held_bytes() + io_bytes_ + growth - max_total_bytes_, conn)) {
  }
  return ok();
}

namespace {

// One value of a MULTI_GET or PEEK reply: shared, not copied, when big (ReplyBuffer::kShareAtLeast); `total` counts
// the reply's bytes, `copied` what the reply copies (both checked before it is built).
void gather(const BlobPtr& value, std::vector<BlobPtr>& values, std::uint64_t& total, std::uint64_t& copied) {
  const auto n = value->bytes.size();
  total += 8 + n;
  copied += 8 + (n < ReplyBuffer::kShareAtLeast ? n : 0);
  values.push_back(value);
}

}  // namespace

bool Keyspace::reply_fits(ConnId conn, std::uint64_t reply_bytes, Refusable& res, const char* what) const {
  const std::uint64_t pending = events_.unread_reply_bytes(conn);
  if (pending + reply_bytes <= max_reply_bytes_) return true;
  res.kind = Refusal::kReplyBudget;
  res.refused = fmt::format(
      "{}: its reply of {} bytes (plus {} unread) would exceed the limit of {} bytes of unread replies per "
      "connection (--max-pending-bytes)",
      what, reply_bytes, pending, max_reply_bytes_);
  return false;
}

void Keyspace::retire(BlobPtr& b) {
  if (b && b.use_count() > 1 && !b->orphaned) {
    b->orphaned = orphaned_;
    *orphaned_ += b->bytes.size();
  }
  b.reset();
}

void Keyspace::release(ConnId conn) { events_.waiter_released(conn); }

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

void Keyspace::unregister_entries(const std::vector<std::string>& keys, std::size_t from, std::size_t to, ConnId conn,
                                  std::uint64_t gen) {
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
      release(x.conn);
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
      release(c);
    }
    break;
  }
  if (list.empty()) waiters_.erase(w);
}

void Keyspace::too_big(Refusable& res, const char* what) const {
  res.kind = Refusal::kMemory;
  res.refused =
      fmt::format("{} would exceed the server's memory limit of {} bytes (--max-total-bytes)", what, max_total_bytes_);
}

// A big WAIT, kSliceKeys keys at a time. The registration exists from the first slice on (registering), so
// a key set between slices counts; it is answered only after the last slice, if nothing is missing.
WaitResult Keyspace::wait_slice(ConnId conn, const std::vector<std::string>& keys) {
  WaitResult res;
  auto& sl = slicing_[conn];
  auto reg = waits_.find(conn);
  if (reg == waits_.end()) {
    WaitRegistration fresh;
    fresh.gen = next_gen_++;
    fresh.registering = true;
    fresh.cost = kEntryOverhead;
    if (!fits(fresh.cost, conn)) {
      slicing_.erase(conn);
      too_big(res, "WAIT");
      return res;
    }
    wait_bytes_ += fresh.cost;
    reg = waits_.emplace(conn, std::move(fresh)).first;
  }
  auto& w = reg->second;
  const std::size_t to = std::min(keys.size(), sl.pos + kSliceKeys);
  std::uint64_t cost = 0;
  for (std::size_t i = sl.pos; i < to; ++i)
    if (!present(keys[i]) && !sl.seen.count(keys[i])) cost += keys[i].size() + kEntryOverhead;
  if (!fits(cost, conn)) {
    drop_wait(conn);
    too_big(res, "WAIT");
    return res;
  }
  for (std::size_t i = sl.pos; i < to; ++i) {
    const auto& k = keys[i];
    if (present(k) || !sl.seen.insert(k).second) continue;
    waiters_[k].push_back({conn, w.gen});
    w.keys.push_back(k);
    ++w.remaining;
  }
  w.cost += cost;
  wait_bytes_ += cost;
  sl.pos = to;
  if (to < keys.size()) {
    res.more = true;
    return res;
  }
  slicing_.erase(conn);
  w.registering = false;
  if (w.remaining == 0) {
    // Everything is there (or appeared meanwhile): answer now; leftover entries are stale.
    drop_wait(conn);
    res.ready = true;
  }
  return res;
}

// A big MULTI_SET (already checked against the memory limit as a whole), kSliceKeys keys at a time.
MultiSetResult Keyspace::multi_set_slice(ConnId conn, const std::vector<std::string>& keys,
                                         const std::vector<std::string>& values) {
  auto& sl = slicing_[conn];
  const std::size_t to = std::min(keys.size(), sl.pos + kSliceKeys);
  for (std::size_t i = sl.pos; i < to; ++i) store(keys[i], values[i]);
  sl.pos = to;
  MultiSetResult res;
  if (to < keys.size()) {
    res.more = true;
    return res;
  }
  slicing_.erase(conn);
  return res;
}

void Keyspace::notify_watchers(const std::string& key, KeyChange change, const BlobPtr& old_value,
                               const BlobPtr& new_value) {
  auto w = watchers_.find(key);
  if (w == watchers_.end()) return;
  for (ConnId c : w->second) events_.key_changed(c, change, key, old_value, new_value);
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
    notify_watchers(key, created ? KeyChange::kCreated : KeyChange::kUpdated, old, data_[key]);
  }
}

SetResult Keyspace::set(ConnId conn, const std::string& key, std::string_view value) {
  SetResult res;
  auto it = data_.find(key);
  const std::uint64_t growth = it == data_.end()                         ? entry_cost(key.size(), value.size())
                               : value.size() > it->second->bytes.size() ? value.size() - it->second->bytes.size()
                                                                         : 0;
  if (!fits(growth, conn)) {
    too_big(res, "SET");
    return res;
  }
  store(key, std::string(value));
  return res;
}

SetResult Keyspace::append(ConnId conn, const std::string& key, std::string_view value) {
  SetResult res;
  auto it = data_.find(key);
  if (!fits(it == data_.end() ? entry_cost(key.size(), value.size()) : value.size(), conn)) {
    too_big(res, "APPEND");
    return res;
  }
  if (it == data_.end()) {
    store(key, std::string(value));
    return res;
  }
  BlobPtr old = it->second;
  if (old.use_count() > 2 || !watchers_.empty()) {
    // Replies (or watch events about to be sent) hold the current bytes: copy on write.
    std::string joined = old->bytes;
    joined.append(value);
    put_value(key, std::make_shared<Blob>(std::move(joined)));
  } else {
    old->bytes.append(value);
    bytes_ += value.size();
  }
  wake_all(key);
  notify_watchers(key, KeyChange::kUpdated, old, data_[key]);
  return res;
}

CompareSetResult Keyspace::compare_set(ConnId conn, const std::string& key, std::string_view expected,
                                       std::string_view desired) {
  CompareSetResult res;
  auto it = data_.find(key);
  if (it == data_.end()) {
    if (!expected.empty()) {
      // PyTorch "lies" here: nothing is stored and the caller gets its own expected value back.
      res.value = std::make_shared<Blob>(std::string(expected));
      return res;
    }
    if (!fits(entry_cost(key.size(), desired.size()) + desired.size(), conn)) {
      too_big(res, "COMPARE_SET");
      return res;
    }
    store(key, std::string(desired));  // wakes waiters, as the libuv server (the legacy one does not)
    res.stored = true;
  } else if (it->second->bytes == expected) {
    if (!fits(desired.size(), conn)) {
      too_big(res, "COMPARE_SET");
      return res;
    }
    store(key, std::string(desired));
    res.stored = true;
  }
  res.value = data_[key];
  return res;
}

GetResult Keyspace::get(ConnId conn, const std::string& key) {
  GetResult res;
  auto it = data_.find(key);
  if (it == data_.end()) return res;
  if (!reply_fits(conn, 8 + it->second->bytes.size(), res, "GET")) {
    return res;
  }
  res.value = it->second;
  return res;
}

AddResult Keyspace::add(ConnId conn, const std::string& key, std::int64_t delta) {
  AddResult res;
  auto it = data_.find(key);
  try {
    res.value = add_result(key, it == data_.end() ? nullptr : &it->second->bytes, delta);
  } catch (const StoreError& e) {
    res.refused = e.what();
    return res;
  }
  std::string text = std::to_string(res.value);
  if (!fits(entry_cost(key.size(), text.size()), conn)) {
    too_big(res, "ADD");
    return res;
  }
  store(key, std::move(text));
  return res;
}

bool Keyspace::check(const std::vector<std::string>& keys) const {
  return std::all_of(keys.begin(), keys.end(), [&](const std::string& k) { return present(k); });
}

WaitResult Keyspace::wait(ConnId conn, const std::vector<std::string>& keys, bool register_waiter) {
  WaitResult res;
  if (!register_waiter) {
    res.ready = check(keys);
    return res;
  }
  if (keys.size() > kSliceKeys) return wait_slice(conn, keys);
  // Linear in the number of keys (a hash set for the duplicates): one WAIT naming 128K keys must not
  // hold the loop for seconds.
  std::vector<std::string> missing;
  std::unordered_set<std::string_view> seen;
  std::uint64_t cost = kEntryOverhead;
  for (const auto& k : keys) {
    if (present(k) || !seen.insert(k).second) continue;
    missing.push_back(k);
    cost += k.size() + kEntryOverhead;
  }
  if (missing.empty()) {
    res.ready = true;
    return res;
  }
  if (!fits(cost, conn)) {
    too_big(res, "WAIT");
    return res;
  }
  register_wait(conn, std::move(missing), false, cost);  // answered later with exactly one STOP_WAITING
  return res;
}

bool Keyspace::delete_key(const std::string& key) {
  auto it = data_.find(key);
  if (it == data_.end()) return false;
  BlobPtr old = std::move(it->second);
  bytes_ -= it->first.size() + old->bytes.size();
  data_.erase(it);
  notify_watchers(key, KeyChange::kDeleted, old, nullptr);
  retire(old);
  return true;
}

MultiGetResult Keyspace::finish_multi_get(ConnId conn, std::vector<BlobPtr> values, std::uint64_t total,
                                          std::uint64_t copied, const std::string* missing_key, const char* what) {
  MultiGetResult res;
  if (!reply_fits(conn, total, res, what)) {
    return res;
  }
  if (!fits(copied, conn)) {
    too_big(res, what);
    return res;
  }
  res.values = std::move(values);
  if (missing_key) {
    res.missing = true;
    res.refused = fmt::format("MULTI_GET of missing key '{}'", printable_key(*missing_key));
  }
  return res;
}

MultiGetResult Keyspace::multi_get(ConnId conn, const std::vector<std::string>& keys) {
  if (keys.size() > kSliceKeys) return multi_get_slice(conn, keys);
  // Sized before anything is built: the reply shares the values (one 8 MiB key asked 480 times is one
  // copy), and the per-connection limit on unread replies is checked on its full length.
  std::vector<BlobPtr> values;
  values.reserve(keys.size());
  std::uint64_t total = 0, copied = 0;
  for (const auto& k : keys) {
    auto it = data_.find(k);
    if (it == data_.end()) return finish_multi_get(conn, std::move(values), total, copied, &k);
    gather(it->second, values, total, copied);
  }
  return finish_multi_get(conn, std::move(values), total, copied, nullptr);
}

MultiGetResult Keyspace::peek(ConnId conn, const std::vector<std::string>& keys, std::string_view absent) {
  std::vector<BlobPtr> values;
  values.reserve(keys.size());
  std::uint64_t total = 0, copied = 0;
  BlobPtr marker;  // one blob for every missing key
  for (const auto& k : keys) {
    auto it = data_.find(k);
    if (it != data_.end()) {
      gather(it->second, values, total, copied);
      continue;
    }
    if (!marker) marker = std::make_shared<Blob>(std::string(absent));
    gather(marker, values, total, copied);
  }
  return finish_multi_get(conn, std::move(values), total, copied, nullptr, "PEEK");
}

MultiGetResult Keyspace::multi_get_slice(ConnId conn, const std::vector<std::string>& keys) {
  auto& sl = slicing_[conn];
  const std::size_t to = std::min(keys.size(), sl.pos + kSliceKeys);
  for (std::size_t i = sl.pos; i < to; ++i) {
    auto it = data_.find(keys[i]);
    if (it == data_.end()) {
      auto values = std::move(sl.gathered);
      const auto total = sl.total, copied = sl.copied;
      slicing_.erase(conn);
      return finish_multi_get(conn, std::move(values), total, copied, &keys[i]);
    }
    gather(it->second, sl.gathered, sl.total, sl.copied);
  }
  sl.pos = to;
  if (to < keys.size()) {
    MultiGetResult res;
    res.more = true;
    return res;
  }
  auto values = std::move(sl.gathered);
  const auto total = sl.total, copied = sl.copied;
  slicing_.erase(conn);
  return finish_multi_get(conn, std::move(values), total, copied, nullptr);
}

CheckResult Keyspace::check(ConnId conn, const std::vector<std::string>& keys) {
  if (keys.size() <= kSliceKeys) return {check(keys), false};
  return check_slice(conn, keys);
}

CheckResult Keyspace::check_slice(ConnId conn, const std::vector<std::string>& keys) {
  auto& sl = slicing_[conn];
  const std::size_t to = std::min(keys.size(), sl.pos + kSliceKeys);
  for (std::size_t i = sl.pos; i < to; ++i) {
    if (!present(keys[i])) {
      slicing_.erase(conn);
      return {false, false};
    }
  }
  sl.pos = to;
  if (to < keys.size()) return {false, true};
  slicing_.erase(conn);
  return {true, false};
}

MultiSetResult Keyspace::multi_set(ConnId conn, const std::vector<std::string>& keys,
                                   const std::vector<std::string>& values) {
  MultiSetResult res;
  if (keys.size() != values.size()) {
    res.refused = fmt::format("MULTI_SET with {} keys but {} values", keys.size(), values.size());
    return res;
  }
  std::uint64_t growth = 0;
  for (std::size_t i = 0; i < keys.size(); ++i) growth += entry_cost(keys[i].size(), values[i].size());
  if (!fits(growth, conn)) {
    too_big(res, "MULTI_SET");
    return res;
  }
  if (keys.size() > kSliceKeys) return multi_set_slice(conn, keys, values);
  for (std::size_t i = 0; i < keys.size(); ++i) store(keys[i], values[i]);
  return res;
}

SetResult Keyspace::queue_push(ConnId conn, const std::string& key, std::string_view value) {
  SetResult res;
  auto q = queues_.find(key);
  const std::uint64_t growth = value.size() + (q == queues_.end() ? key.size() : 0);
  if (!fits(growth + kEntryOverhead * (q == queues_.end() ? 2 : 1), conn)) {
    too_big(res, "QUEUE_PUSH");
    return res;
  }
  if (q == queues_.end()) q = queues_.emplace(key, std::deque<BlobPtr>{}).first;
  q->second.push_back(std::make_shared<Blob>(std::string(value)));
  bytes_ += growth;
  ++queued_;
  wake_one(key);
  return res;
}

QueuePopResult Keyspace::queue_pop(ConnId conn, const std::string& key) {
  QueuePopResult res;
  auto q = queues_.find(key);
  res.length = q == queues_.end() ? 0 : static_cast<std::int64_t>(q->second.size());
  if (res.length == 0) return res;
  if (!reply_fits(conn, 16 + q->second.front()->bytes.size(), res, "QUEUE_POP")) {
    return res;
  }
  res.value = std::move(q->second.front());
  q->second.pop_front();
  bytes_ -= res.value->bytes.size();
  --queued_;
  // The popped value is now the reply's: count it as orphaned until written (retire on a copy of the
  // pointer keeps res.value alive).
  BlobPtr held = res.value;
  retire(held);
  if (q->second.empty()) {
    bytes_ -= q->first.size();
    queues_.erase(q);
  }
  return res;
}

std::int64_t Keyspace::queue_len(const std::string& key) const {
  auto q = queues_.find(key);
  return q == queues_.end() ? 0 : static_cast<std::int64_t>(q->second.size());
}

ListKeysResult Keyspace::list_keys(ConnId conn) {
  ListKeysResult res;
  std::uint64_t total = 8;
  for (const auto& [k, v] : data_) total += 8 + k.size();
  if (!reply_fits(conn, total, res, "LIST_KEYS")) {
    return res;
  }
  if (!fits(2 * total, conn)) {  // the list here, then the encoded reply
    too_big(res, "LIST_KEYS");
    return res;
  }
  res.keys.reserve(data_.size());
  for (const auto& [k, v] : data_) res.keys.push_back(k);
  return res;
}

BarrierResult Keyspace::barrier(ConnId conn, const std::string& key, std::int64_t world_size, bool register_waiter) {
  BarrierResult res;
  res.count = 1;
  auto it = data_.find(key);
  if (it != data_.end()) {
    auto current = parse_stoll(it->second->bytes);
    if (!current || *current == INT64_MAX) {
      res.refused = fmt::format("BARRIER on key '{}' whose value is not a counter", printable_key(key));
      return res;
    }
    res.count = *current + 1;
  }
  std::string text = std::to_string(res.count);
  const std::uint64_t wait_cost = register_waiter ? key.size() + 2 * kEntryOverhead : 0;
  if (!fits(entry_cost(key.size(), text.size()) + wait_cost, conn)) {
    too_big(res, "BARRIER");
    return res;
  }
  res.reached = res.count >= world_size;
  // Storing the counter wakes plain WAITers on the key; earlier barrier arrivals only when it is reached.
  put_value(key, std::make_shared<Blob>(std::move(text)));
  wake_all(key, res.reached);
  if (!res.reached && register_waiter) register_wait(conn, {key}, true, wait_cost);
  return res;
}

SetResult Keyspace::watch(ConnId conn, const std::string& key) {
  SetResult res;
  auto& list = watchers_[key];
  if (std::find(list.begin(), list.end(), conn) != list.end()) return res;
  const std::uint64_t cost = key.size() + 2 * kEntryOverhead;
  if (!fits(cost, conn)) {
    if (list.empty()) watchers_.erase(key);
    too_big(res, "WATCH_KEY");
    return res;
  }
  list.push_back(conn);
  watched_by_[conn].push_back(key);
  watch_bytes_ += cost;
  return res;
}

Keyspace::OnCloseResult Keyspace::on_close(ConnId conn, const std::string& key, std::string_view value, bool enable) {
  OnCloseResult res;
  auto& mine = on_close_[conn];
  auto it = mine.find(key);
  if (it != mine.end()) {
    on_close_bytes_ -= key.size() + it->second.size() + kEntryOverhead;
    mine.erase(it);
  }
  if (enable) {
    const std::uint64_t cost = key.size() + value.size() + kEntryOverhead;
    if (!fits(cost, conn)) {
      too_big(res, "ON_CLOSE");
    } else {
      mine.emplace(key, std::string(value));
      on_close_bytes_ += cost;
    }
  }
  res.count = static_cast<std::int64_t>(mine.size());
  if (mine.empty()) on_close_.erase(conn);
  return res;
}

Keyspace::OnCloseResult Keyspace::on_silence(ConnId conn, const std::string& key, std::string_view silent,
                                             std::string_view back, std::chrono::milliseconds timeout) {
  OnCloseResult res;
  auto& mine = on_silence_[conn];
  if (auto it = mine.find(key); it != mine.end()) {
    on_silence_bytes_ -= key.size() + it->second.silent.size() + it->second.back.size() + kEntryOverhead;
    mine.erase(it);
  }
  if (timeout.count() > 0) {
    const std::uint64_t cost = key.size() + silent.size() + back.size() + kEntryOverhead;
    if (!fits(cost, conn)) {
      too_big(res, "ON_SILENCE");
    } else {
      mine.emplace(key, OnSilence{std::string(silent), std::string(back), timeout});
      on_silence_bytes_ += cost;
    }
  }
  res.count = static_cast<std::int64_t>(mine.size());
  if (mine.empty()) on_silence_.erase(conn);
  return res;
}

bool Keyspace::quiet(ConnId conn, std::chrono::milliseconds quiet) {
  auto it = on_silence_.find(conn);
  if (it == on_silence_.end()) return false;
  bool fired = false;
  for (auto& [key, reg] : it->second) {
    if (reg.fired || quiet < reg.timeout) continue;
    reg.fired = true;
    fired = true;
    (void)append(conn, key, reg.silent);  // a full store drops it: the heartbeat is the slower way to learn
  }
  return fired;
}

void Keyspace::spoke(ConnId conn) {
  auto it = on_silence_.find(conn);
  if (it == on_silence_.end()) return;
  for (auto& [key, reg] : it->second) {
    if (!reg.fired) continue;
    reg.fired = false;
    (void)append(conn, key, reg.back);
  }
}

void Keyspace::forget(ConnId conn) {
  drop_wait(conn);
  std::unordered_map<std::string, OnSilence> silences;
  if (auto os = on_silence_.find(conn); os != on_silence_.end()) {
    silences = std::move(os->second);
    on_silence_.erase(os);
    for (const auto& [key, reg] : silences)
      on_silence_bytes_ -= key.size() + reg.silent.size() + reg.back.size() + kEntryOverhead;
  }
  if (auto oc = on_close_.find(conn); oc != on_close_.end()) {
    auto registered = std::move(oc->second);
    on_close_.erase(oc);
    for (const auto& [key, value] : registered) {
      on_close_bytes_ -= key.size() + value.size() + kEntryOverhead;
      // Silent before it closed: that was reported already (one loss, not two).
      if (auto s = silences.find(key); s != silences.end() && s->second.fired) continue;
      // A full store drops the append (refused): whoever relies on it has a slower way to learn (heartbeats).
      (void)append(conn, key, value);
    }
  }
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

std::optional<std::string> Keyspace::value(const std::string& key) const {
  auto it = data_.find(key);
  if (it == data_.end()) return std::nullopt;
  return it->second->bytes;
}

std::vector<std::string> Keyspace::queue_elements(const std::string& key) const {
  std::vector<std::string> out;
  auto q = queues_.find(key);
  if (q != queues_.end())
    for (const auto& e : q->second) out.push_back(e->bytes);
  return out;
}

std::vector<std::string> Keyspace::keys() const {
  std::vector<std::string> out;
  out.reserve(data_.size());
  for (const auto& [k, v] : data_) out.push_back(k);
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace ctrun::store::detail
