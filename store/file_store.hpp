#pragma once
// A Store in a shared file, for init_method file:///path (ranks on one host or on a shared filesystem).
// The file is a log of set/delete/push/pop records; every operation takes an exclusive flock, replays the log
// into a detail::Keyspace (the semantics every store shares, store/keyspace.hpp), runs the command on it
// and appends what changed. Waits poll every few milliseconds. Meant for rendezvous (a handful of keys), not as a data
// store. Like torch's FileStore, use a fresh path per job: keys left by an earlier job would be read as current.

#include <mutex>
#include <string>

#include "store/store.hpp"

namespace ctrun::store {

class FileStore final : public Store {
 public:
  FileStore(std::string path, Duration timeout);

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
  Duration timeout() const override { return timeout_; }
  void set_timeout(Duration timeout) override { timeout_ = timeout; }

 private:
  // Runs fn(keyspace, log) under the file lock with the current contents; fn tells `log` what it changed.
  template <class Fn>
  auto locked(Fn&& fn);

  std::string path_;
  Duration timeout_;
  std::mutex mutex_;  // flock is per open file description; threads of one process serialise here
};

}  // namespace ctrun::store
