#include "store/memory_store.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "store/store_util.hpp"

namespace ctrun::store {

MemoryStore::MemoryStore(Duration timeout) : timeout_(timeout) {}

bool MemoryStore::present_locked(const std::string& key) const {
  if (data_.count(key) != 0) return true;
  auto q = queues_.find(key);
  return q != queues_.end() && !q->second.empty();
}

void MemoryStore::wait_locked(std::unique_lock<std::mutex>& lock, const std::vector<std::string>& keys,
                              Duration timeout) {
  auto all_present = [&] {
    for (const auto& k : keys)
      if (!present_locked(k)) return false;
    return true;
  };
  if (!changed_.wait_for(lock, timeout, all_present)) {
    throw TimeoutError(wait_timeout_message(keys, timeout));
  }
}

void MemoryStore::set(const std::string& key, std::string_view value) {
  {
    std::lock_guard lock(mutex_);
    data_[key] = std::string(value);
  }
  changed_.notify_all();
}

std::string MemoryStore::get(const std::string& key) {
  std::unique_lock lock(mutex_);
  wait_locked(lock, {key}, timeout_);
  return data_.at(key);
}

std::string MemoryStore::compare_set(const std::string& key, std::string_view expected, std::string_view desired) {
  std::string result;
  {
    std::lock_guard lock(mutex_);
    auto it = data_.find(key);
    if (it == data_.end()) {
      if (!expected.empty()) return std::string(expected);
      result = data_[key] = std::string(desired);
    } else {
      if (it->second == expected) it->second = std::string(desired);
      result = it->second;
    }
  }
  changed_.notify_all();
  return result;
}

std::int64_t MemoryStore::add(const std::string& key, std::int64_t delta) {
  std::int64_t value = delta;
  {
    std::lock_guard lock(mutex_);
    auto it = data_.find(key);
    value = add_result(key, it == data_.end() ? nullptr : &it->second, delta);
    data_[key] = std::to_string(value);
  }
  changed_.notify_all();
  return value;
}

bool MemoryStore::check(const std::vector<std::string>& keys) {
  std::lock_guard lock(mutex_);
  for (const auto& k : keys)
    if (!present_locked(k)) return false;
  return true;
}

void MemoryStore::wait(const std::vector<std::string>& keys, Duration timeout) {
  std::unique_lock lock(mutex_);
  wait_locked(lock, keys, timeout);
}

std::int64_t MemoryStore::num_keys() {
  std::lock_guard lock(mutex_);
  return static_cast<std::int64_t>(data_.size());
}

bool MemoryStore::delete_key(const std::string& key) {
  std::lock_guard lock(mutex_);
  return data_.erase(key) != 0;
}

void MemoryStore::append(const std::string& key, std::string_view value) {
  {
    std::lock_guard lock(mutex_);
    data_[key].append(value);
  }
  changed_.notify_all();
}

std::vector<std::string> MemoryStore::multi_get(const std::vector<std::string>& keys) {
  std::unique_lock lock(mutex_);
  wait_locked(lock, keys, timeout_);
  std::vector<std::string> out;
  out.reserve(keys.size());
  for (const auto& k : keys) out.push_back(data_.at(k));
  return out;
}

void MemoryStore::multi_set(const std::vector<std::string>& keys, const std::vector<std::string>& values) {
  check_multi_set_sizes(keys, values);
  {
    std::lock_guard lock(mutex_);
    for (std::size_t i = 0; i < keys.size(); ++i) data_[keys[i]] = values[i];
  }
  changed_.notify_all();
}

void MemoryStore::queue_push(const std::string& key, std::string_view value) {
  {
    std::lock_guard lock(mutex_);
    queues_[key].emplace_back(value);
  }
  changed_.notify_all();
}

std::optional<std::string> MemoryStore::queue_pop(const std::string& key, bool block) {
  std::unique_lock lock(mutex_);
  if (block) wait_locked(lock, {key}, timeout_);
  auto it = queues_.find(key);
  if (it == queues_.end() || it->second.empty()) return std::nullopt;
  std::string v = std::move(it->second.front());
  it->second.pop_front();
  return v;
}

std::int64_t MemoryStore::queue_len(const std::string& key) {
  std::lock_guard lock(mutex_);
  auto it = queues_.find(key);
  return it == queues_.end() ? 0 : static_cast<std::int64_t>(it->second.size());
}

std::vector<std::string> MemoryStore::list_keys() {
  std::lock_guard lock(mutex_);
  std::vector<std::string> keys;
  keys.reserve(data_.size());
  for (const auto& [k, v] : data_) keys.push_back(k);
  return keys;
}

void MemoryStore::barrier(const std::string& key, std::int64_t world_size, Duration timeout) {
  std::unique_lock lock(mutex_);
  auto it = data_.find(key);
  std::int64_t count = (it == data_.end() ? 0 : parse_add_operand(key, it->second)) + 1;
  data_[key] = std::to_string(count);
  if (count >= world_size) {
    lock.unlock();
    changed_.notify_all();
    return;
  }
  auto done = [&] {
    auto cur = data_.find(key);
    return cur == data_.end() || parse_add_operand(key, cur->second) >= world_size;
  };
  if (!changed_.wait_for(lock, timeout, done)) {
    throw TimeoutError(fmt::format("barrier on key '{}' timed out after {} ms: {} of {} arrived", key,
                                   timeout.count(), parse_add_operand(key, data_[key]), world_size));
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
  std::lock_guard lock(mutex_);
  data_.clear();
  queues_.clear();
}

}  // namespace ctrun::store
