#pragma once
// An in-process Store with the same semantics as our TCPStore server, because it is built on the same code
// (detail::Keyspace, store/keyspace.hpp) under a mutex: for fast tests of the layers above (threads as
// ranks, rendezvous state machines) and for single-process users.

#include <condition_variable>
#include <memory>
#include <mutex>

#include "store/store.hpp"

namespace ctrun::store {

class MemoryStore final : public Store {
 public:
  explicit MemoryStore(Duration timeout = kDefaultTimeout);
  ~MemoryStore() override;

  void set(const std::string& key, std::string_view value) override;
  std::string get(const std::string& key) override;
  std::string compare_set(const std::string& key, std::string_view expected, std::string_view desired) override;
  std::int64_t add(const std::string& key, std::int64_t delta) override;
  bool check(const std::vector<std::string>& keys) override;
  using Store::wait;
  void wait(const std::vector<std::string>& keys, Duration timeout) override;
  std::int64_t num_keys() override;
  bool delete_key(const std::string& key) override;
  void append(const std::string& key, std::string_view value) override;
  std::vector<std::string> multi_get(const std::vector<std::string>& keys) override;
  void multi_set(const std::vector<std::string>& keys, const std::vector<std::string>& values) override;
  void queue_push(const std::string& key, std::string_view value) override;
  std::optional<std::string> queue_pop(const std::string& key, bool block) override;
  std::int64_t queue_len(const std::string& key) override;
  std::vector<std::string> list_keys() override;
  void barrier(const std::string& key, std::int64_t world_size, Duration timeout) override;
  Duration timeout() const override;
  void set_timeout(Duration timeout) override;

  // Removes every key and queue (the agent's fresh keyspace per attempt).
  void clear();

 private:
  struct Impl;
  void wait_locked(std::unique_lock<std::mutex>& lock, const std::vector<std::string>& keys, Duration timeout);

  mutable std::mutex mutex_;
  std::condition_variable changed_;
  std::unique_ptr<Impl> impl_;  // the keyspace, guarded by mutex_
  Duration timeout_;
};

}  // namespace ctrun::store
