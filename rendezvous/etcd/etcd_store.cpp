#include "rendezvous/etcd/etcd_store.hpp"

#include <unistd.h>

#include <atomic>
#include <random>

#include <fmt/format.h>

#include "store/store_util.hpp"
#include "common/text.hpp"

namespace ctrun::rdzv::etcd {
namespace {

constexpr std::size_t kMaxTxnOps = 128;  // etcd's default --max-txn-ops
constexpr std::string_view kRdzvPrefix = "ctrun.rdzv.";

// Counters (add) are stored as "\x01ctr:<offset>" and their value is the key's etcd version minus offset: every PUT
// raises the version by exactly one, atomically, so concurrent `add 1`s all write the SAME bytes under a compare
// on those bytes and none of them loses a race (an optimistic read-modify-write would: 256 arrivals adding to
// `joined` at once cost O(N^2) failed txns). Any other delta, or a key holding a plain number, is one CAS on the
// key's mod_revision that writes a new offset.
constexpr std::string_view kCounterTag = "\x01ctr:";

std::optional<std::int64_t> counter_offset(const std::string& value) {
  if (value.rfind(kCounterTag, 0) != 0) return std::nullopt;
  return std::stoll(value.substr(kCounterTag.size()));
}

std::string counter_value(std::int64_t offset) { return std::string(kCounterTag) + std::to_string(offset); }

// The value a reader sees: a counter's decimal value, else the bytes stored.
std::string decode(const KeyValue& kv) {
  if (auto o = counter_offset(kv.value)) return std::to_string(kv.version - *o);
  return kv.value;
}

// Unique across processes, hosts and store instances: pid, a random salt, a per-process counter.
std::string writer_id() {
  static const std::uint64_t salt = std::random_device{}();
  static std::atomic<std::uint64_t> counter{0};
  return fmt::format("{}.{:x}.{}", ::getpid(), salt & 0xffffffff, counter++);
}

}  // namespace

EtcdStore::EtcdStore(std::shared_ptr<Client> client, std::shared_ptr<RunLease> lease, store::Duration timeout)
    : client_(std::move(client)), lease_(std::move(lease)), timeout_(timeout), writer_(writer_id()) {}

std::string EtcdStore::to_etcd(const std::string& key) {
  if (key.rfind(kRdzvPrefix, 0) == 0) return kNamespace + key.substr(kRdzvPrefix.size());
  return kNamespace + key;
}

std::string EtcdStore::from_etcd(const std::string& key) {
  const std::string ns = kNamespace;
  auto rest = key.rfind(ns, 0) == 0 ? key.substr(ns.size()) : key;
  return std::string(kRdzvPrefix) + rest;
}

template <class F>
auto EtcdStore::with_lease(F write) {
  const auto id = lease_id();
  try {
    return write(id);
  } catch (const EtcdError& e) {
    if (!lease_ || e.code() != GrpcStatus::kNotFound) throw;
    return write(lease_->renew(id));
  }
}

void EtcdStore::set(const std::string& key, std::string_view value) {
  with_lease([&](std::int64_t lease) { return client_->put(to_etcd(key), std::string(value), lease); });
}

std::string EtcdStore::get(const std::string& key) { return multi_get({key}).front(); }

std::string EtcdStore::compare_set(const std::string& key, std::string_view expected, std::string_view desired) {
  const auto k = to_etcd(key);
  // A txn with a PUT goes through raft even when its compare fails: when many nodes race for one key (the decider
  // of a round), a read first spares the losers' proposals once the winner's write is visible.
  auto seen = client_->range(k);
  if (!seen.kvs.empty() && decode(seen.kvs.front()) != expected) return decode(seen.kvs.front());
  if (seen.kvs.empty() && !expected.empty()) return std::string(expected);
  auto compare = expected.empty() ? Compare{Compare::Target::kCreate, k, 0, {}}
                                  : Compare{Compare::Target::kValue, k, 0, std::string(expected)};
  auto r = with_lease([&](std::int64_t lease) {
    return client_->txn({compare}, {Op::put(k, std::string(desired), lease)}, {Op::get(k)});
  });
  if (r.succeeded) return std::string(desired);
  if (r.ranges.empty() || r.ranges.front().kvs.empty()) return std::string(expected);  // missing, expected non-empty
  return decode(r.ranges.front().kvs.front());
}

// A txn whose answer was lost may have been applied before the client retried it on another member; a blind retry
// would then add twice (a phantom arrival in `joined`). So each update also writes a token to this writer's marker
// of the key, and a failed compare whose marker holds our token means the first try went through.
std::string EtcdStore::update(const std::string& key,
                              const std::function<std::string(const std::optional<std::string>&)>& next) {
  const auto k = to_etcd(key);
  const auto marker = k + "#w" + writer_;
  auto current = client_->range(k);
  for (;;) {
    std::optional<std::string> value;
    std::int64_t mod = 0;
    if (!current.kvs.empty()) {
      value = decode(current.kvs.front());
      mod = current.kvs.front().mod_revision;
    }
    auto desired = next(value);
    const auto token = std::to_string(++writes_);
    auto r = with_lease([&](std::int64_t lease) {
      return client_->txn({Compare{Compare::Target::kMod, k, mod, {}}},
                          {Op::put(k, desired, lease), Op::put(marker, token, lease)}, {Op::get(k), Op::get(marker)});
    });
    if (r.succeeded) return desired;
    if (r.ranges.size() == 2 && !r.ranges[1].kvs.empty() && r.ranges[1].kvs.front().value == token) return desired;
    current = r.ranges.empty() ? client_->range(k) : std::move(r.ranges.front());  // lost a race: retry on its value
  }
}

std::int64_t EtcdStore::add(const std::string& key, std::int64_t delta) {
  const auto k = to_etcd(key);
  auto current = client_->range(k);
  if (delta == 0) return current.kvs.empty() ? 0 : store::parse_add_operand(key, decode(current.kvs.front()));
  // A txn retried after its answer was lost may have been applied: each add also writes a token to this writer's
  // marker of the key, under a compare on the marker's revision as this store last wrote it. The retry then fails
  // that compare, finds its token, and reads its result from the counter as of the marker's revision.
  const auto marker = k + "#w" + writer_;
  std::int64_t marker_rev = 0;
  {
    std::lock_guard lock(markers_mutex_);
    if (auto it = marker_revs_.find(marker); it != marker_revs_.end()) marker_rev = it->second;
  }
  for (;;) {
    const auto token = std::to_string(++writes_);
    std::vector<Compare> compare{Compare{Compare::Target::kMod, marker, marker_rev, {}}};
    std::string value;
    std::optional<std::int64_t> result;  // known before the put unless it is a same-bytes unit add
    std::optional<std::int64_t> offset;
    if (current.kvs.empty()) {  // created by this add: version 1
      compare.push_back(Compare{Compare::Target::kCreate, k, 0, {}});
      value = counter_value(1 - delta);
      result = delta;
    } else if (const auto& kv = current.kvs.front(); (offset = counter_offset(kv.value)) && delta == 1) {
      compare.push_back(Compare{Compare::Target::kValue, k, 0, kv.value});  // every unit adder writes these bytes
      value = kv.value;
    } else {
      const auto next = store::parse_add_operand(key, decode(kv)) + delta;
      compare.push_back(Compare{Compare::Target::kMod, k, kv.mod_revision, {}});
      value = counter_value(kv.version + 1 - next);
      result = next;
    }
    auto r = with_lease([&](std::int64_t lease) {
      return client_->txn(compare, {Op::put(k, value, lease, true), Op::put(marker, token, lease)},
                          {Op::get(k), Op::get(marker)});
    });
    auto remember = [&](std::int64_t rev) {
      std::lock_guard lock(markers_mutex_);
      marker_revs_[marker] = rev;
    };
    if (r.succeeded) {
      remember(r.revision);
      if (result) return *result;
      if (!r.prev_kv) throw store::StoreError("etcd: a counter update answered without the previous version");
      return r.prev_kv->version + 1 - *offset;
    }
    if (r.ranges.size() != 2) throw store::StoreError("etcd: a counter txn answered with a wrong count");
    if (!r.ranges[1].kvs.empty() && r.ranges[1].kvs.front().value == token) {  // our earlier try went through
      const auto applied_at = r.ranges[1].kvs.front().mod_revision;
      remember(applied_at);
      auto then = client_->range(k, {}, false, false, applied_at);
      if (then.kvs.empty()) throw store::StoreError("etcd: a counter vanished under its update");
      return store::parse_add_operand(key, decode(then.kvs.front()));
    }
    // Follow the marker as it is now: moved by another thread of this store, or gone with a renewed lease (0).
    marker_rev = r.ranges[1].kvs.empty() ? 0 : r.ranges[1].kvs.front().mod_revision;
    remember(marker_rev);
    current = std::move(r.ranges.front());  // lost a race (a non-unit add, a creation): retry on its value
  }
}

void EtcdStore::append(const std::string& key, std::string_view value) {
  update(key, [&](const std::optional<std::string>& v) { return v.value_or("") + std::string(value); });
}

// Values of `keys` (nullopt: missing), in txns of at most kMaxTxnOps ranges.
std::vector<std::optional<std::string>> EtcdStore::read(const std::vector<std::string>& keys, bool keys_only) {
  std::vector<std::optional<std::string>> out;
  out.reserve(keys.size());
  for (std::size_t i = 0; i < keys.size(); i += kMaxTxnOps) {
    std::vector<Op> ops;
    for (std::size_t j = i; j < std::min(keys.size(), i + kMaxTxnOps); ++j)
      ops.push_back(Op::get(to_etcd(keys[j]), keys_only));
    auto r = client_->txn({}, ops, {});
    if (r.ranges.size() != ops.size()) throw store::StoreError("etcd: a txn of ranges answered with a wrong count");
    for (auto& range : r.ranges)
      out.push_back(range.kvs.empty() ? std::nullopt : std::optional<std::string>(decode(range.kvs.front())));
  }
  return out;
}

bool EtcdStore::check(const std::vector<std::string>& keys) {
  if (keys.size() == 1) return !client_->range(to_etcd(keys.front()), {}, true).kvs.empty();
  for (const auto& v : read(keys, true))
    if (!v) return false;
  return true;
}

void EtcdStore::wait(const std::vector<std::string>& keys, store::Duration timeout) {
  const auto deadline = store::Clock::now() + timeout;
  for (const auto& key : keys) {
    const auto k = to_etcd(key);
    for (;;) {
      auto r = client_->range(k, {}, true);
      if (!r.kvs.empty()) break;
      // Created after the revision of that read, or not yet: the watch from revision + 1 cannot miss it.
      if (store::Clock::now() >= deadline || !client_->watch_put(k, r.revision + 1, deadline)) {
        if (!client_->range(k, {}, true).kvs.empty()) break;
        throw store::TimeoutError(
            fmt::format("etcd: wait for [{}] timed out after {} ms", text::join(keys, ", "), timeout.count()));
      }
    }
  }
}

std::vector<std::string> EtcdStore::multi_get(const std::vector<std::string>& keys) {
  for (;;) {
    wait(keys, timeout_);
    auto values = read(keys, false);
    std::vector<std::string> out;
    out.reserve(values.size());
    for (auto& v : values) {
      if (!v) break;  // deleted between the wait and the read: wait again
      out.push_back(std::move(*v));
    }
    if (out.size() == keys.size()) return out;
  }
}

void EtcdStore::multi_set(const std::vector<std::string>& keys, const std::vector<std::string>& values) {
  if (keys.size() != values.size()) throw store::StoreError("multi_set: keys and values differ in number");
  for (std::size_t i = 0; i < keys.size(); i += kMaxTxnOps) {
    with_lease([&](std::int64_t lease) {
      std::vector<Op> ops;
      for (std::size_t j = i; j < std::min(keys.size(), i + kMaxTxnOps); ++j)
        ops.push_back(Op::put(to_etcd(keys[j]), values[j], lease));
      return client_->txn({}, ops, {});
    });
  }
}

bool EtcdStore::delete_key(const std::string& key) { return client_->delete_range(to_etcd(key)) > 0; }

std::int64_t EtcdStore::num_keys() { return client_->range(kNamespace, prefix_end(kNamespace), true, true).count; }

std::vector<std::string> EtcdStore::list_keys() {
  std::vector<std::string> out;
  for (const auto& kv : client_->range(kNamespace, prefix_end(kNamespace), true).kvs) out.push_back(from_etcd(kv.key));
  return out;
}

void EtcdStore::barrier(const std::string& key, std::int64_t world_size, store::Duration timeout) {
  if (add(key + "/arrived", 1) >= world_size) set(key + "/done", "1");
  wait({key + "/done"}, timeout);
}

void EtcdStore::queue_push(const std::string&, std::string_view) {
  throw store::StoreError(
      "the etcd rendezvous store has no queues (worker stores do; this store is for the rendezvous)");
}

std::optional<std::string> EtcdStore::queue_pop(const std::string&, bool) {
  throw store::StoreError(
      "the etcd rendezvous store has no queues (worker stores do; this store is for the rendezvous)");
}

std::int64_t EtcdStore::queue_len(const std::string&) {
  throw store::StoreError(
      "the etcd rendezvous store has no queues (worker stores do; this store is for the rendezvous)");
}

}  // namespace ctrun::rdzv::etcd
