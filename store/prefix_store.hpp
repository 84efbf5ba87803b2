#pragma once
// PyTorch's PrefixStore: every key becomes prefix + "/" + key (a prefix ending in "/" yields "//", as
// PyTorch). num_keys is NOT filtered (as PyTorch); list_keys returns only this prefix's keys, stripped.

#include <memory>

#include "store/store.hpp"

namespace ctrun::store {

class PrefixStore final : public Store {
 public:
  PrefixStore(std::string prefix, std::shared_ptr<Store> base);

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
  bool append_on_close(const std::string& key, std::string_view on_close, std::string_view on_reconnect) override {
    return base_->append_on_close(join_key(key), on_close, on_reconnect);
  }
  void cancel_on_close(const std::string& key) override { base_->cancel_on_close(join_key(key)); }
  bool append_on_silence(const std::string& key, std::string_view on_silence, std::string_view on_back,
                         Duration timeout) override {
    return base_->append_on_silence(join_key(key), on_silence, on_back, timeout);
  }
  void cancel_on_silence(const std::string& key) override { base_->cancel_on_silence(join_key(key)); }
  std::vector<std::optional<std::string>> peek(const std::vector<std::string>& keys,
                                               std::string_view sentinel) override {
    return base_->peek(join_keys(keys), sentinel);
  }
  std::shared_ptr<AsyncWait> wait_async(const std::vector<std::string>& keys, WaitDone done) override {
    return base_->wait_async(join_keys(keys), std::move(done));
  }
  Duration timeout() const override;
  void set_timeout(Duration timeout) override;

  std::string join_key(const std::string& key) const { return prefix_ + "/" + key; }
  std::vector<std::string> join_keys(const std::vector<std::string>& keys) const;
  const std::shared_ptr<Store>& base() const { return base_; }

 private:
  std::string prefix_;
  std::shared_ptr<Store> base_;
};

}  // namespace ctrun::store
