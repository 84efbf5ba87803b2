#include "store/memory_store.hpp"

#include <cstdint>

#include <fmt/format.h>

#include "store/local_keyspace.hpp"
#include "store/store_util.hpp"

namespace ctrun::store {

using detail::checked;
using detail::kLocalConn;

struct MemoryStore::Impl {
  detail::LocalKeyspace local;
  detail::Keyspace& keyspace = local.keyspace();
};

MemoryStore::MemoryStore(Duration timeout) : impl_(std::make_unique<Impl>()), timeout_(timeout) {}
MemoryStore::~MemoryStore() = default;

void MemoryStore::wait_locked(std::unique_lock<std::mutex>& lock, const std::vector<std::string>& keys,
                              Duration timeout) {
  if (!changed_.wait_for(lock, timeout, [&] { return impl_->keyspace.check(keys); })) {
    throw TimeoutError(wait_timeout_message(keys, timeout));
  }
}

void MemoryStore::set(const std::string& key, std::string_view value) {
  {
    std::lock_guard lock(mutex_);
    checked(impl_->keyspace.set(kLocalConn, key, value));
  }
  changed_.notify_all();
}

std::string MemoryStore::get(const std::string& key) {
  std::unique_lock lock(mutex_);
  wait_locked(lock, {key}, timeout_);
  auto r = impl_->keyspace.get(kLocalConn, key);
  checked(r);
  // A non-empty queue makes its key present for waits (as the servers), but it has no value to GET.
  if (!r.value) throw StoreError(fmt::format("GET of key '{}', which is a queue, not a value", printable_key(key)));
  return r.value->bytes;
}

std::string MemoryStore::compare_set(const std::string& key, std::string_view expected, std::string_view desired) {
  std::string result;
  {
    std::lock_guard lock(mutex_);
    result = checked(impl_->keyspace.compare_set(kLocalConn, key, expected, desired)).value->bytes;
  }
  changed_.notify_all();
  return result;
}

std::int64_t MemoryStore::add(const std::string& key, std::int64_t delta) {
  std::int64_t value = 0;
  {
    std::lock_guard lock(mutex_);
    value = checked(impl_->keyspace.add(kLocalConn, key, delta)).value;
  }
  changed_.notify_all();
  return value;
}

bool MemoryStore::check(const std::vector<std::string>& keys) {
  std::lock_guard lock(mutex_);
  return impl_->keyspace.check(keys);
}

void MemoryStore::wait(const std::vector<std::string>& keys, Duration timeout) {
  std::unique_lock lock(mutex_);
  wait_locked(lock, keys, timeout);
}

std::int64_t MemoryStore::num_keys() {
  std::lock_guard lock(mutex_);
  return static_cast<std::int64_t>(impl_->keyspace.num_keys());
}

bool MemoryStore::delete_key(const std::string& key) {
  std::lock_guard lock(mutex_);
  return impl_->keyspace.delete_key(key);
}

void MemoryStore::append(const std::string& key, std::string_view value) {
  {
    std::lock_guard lock(mutex_);
    checked(impl_->keyspace.append(kLocalConn, key, value));
  }
  changed_.notify_all();
}

std::vector<std::string> MemoryStore::multi_get(const std::vector<std::string>& keys) {
  std::unique_lock lock(mutex_);
  wait_locked(lock, keys, timeout_);
  return detail::run_multi_get(impl_->keyspace, keys);
}

void MemoryStore::multi_set(const std::vector<std::string>& keys, const std::vector<std::string>& values) {
  check_multi_set_sizes(keys, values);
  {
    std::lock_guard lock(mutex_);
    detail::run_multi_set(impl_->keyspace, keys, values);
  }
  changed_.notify_all();
}

void MemoryStore::queue_push(const std::string& key, std::string_view value) {
  {
    std::lock_guard lock(mutex_);
    checked(impl_->keyspace.queue_push(kLocalConn, key, value));
  }
  changed_.notify_all();
}

std::optional<std::string> MemoryStore::queue_pop(const std::string& key, bool block) {
  std::unique_lock lock(mutex_);
  if (block) wait_locked(lock, {key}, timeout_);
  auto r = impl_->keyspace.queue_pop(kLocalConn, key);
  checked(r);
  if (!r.value) return std::nullopt;
  return r.value->bytes;
}

std::int64_t MemoryStore::queue_len(const std::string& key) {
  std::lock_guard lock(mutex_);
  return impl_->keyspace.queue_len(key);
}

std::vector<std::string> MemoryStore::list_keys() {
  std::lock_guard lock(mutex_);
  return impl_->keyspace.keys();
}

void MemoryStore::barrier(const std::string& key, std::int64_t world_size, Duration timeout) {
  std::unique_lock lock(mutex_);
  const auto arrived = checked(impl_->keyspace.barrier(kLocalConn, key, world_size, /*register_waiter=*/false));
  if (arrived.reached) {
    lock.unlock();
    changed_.notify_all();
    return;
  }
  auto count = [&]() -> std::int64_t {
    auto v = impl_->keyspace.value(key);
    return v ? parse_stoll(*v).value_or(0) : -1;  // -1: cleared meanwhile (a fresh keyspace releases all)
  };
  auto done = [&] {
    const auto n = count();
    return n < 0 || n >= world_size;
  };
  if (!changed_.wait_for(lock, timeout, done)) {
    throw TimeoutError(fmt::format("barrier on key '{}' timed out after {} ms: {} of {} arrived", printable_key(key),
                                   timeout.count(), count(), world_size));
  }
}

Duration MemoryStore::timeout() const {
  std::lock_guard lock(mutex_);
  return timeout_;
}

void MemoryStore::set_timeout(Duration timeout) {
  std::lock_guard lock(mutex_);
  timeout_ = timeout;
}

void MemoryStore::clear() {
  {
    std::lock_guard lock(mutex_);
    impl_->keyspace.clear();
  }
  changed_.notify_all();
}

}  // namespace ctrun::store
