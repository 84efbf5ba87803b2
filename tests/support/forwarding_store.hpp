#pragma once
// A Store that forwards every call to another: a test derives from it and overrides the one call it wants to
// interfere with (a write slipped in between two of the code under test's calls, a failure at a chosen moment).

#include <memory>
#include <utility>

#include "store/store.hpp"

namespace ctrun::test {

class ForwardingStore : public store::Store {
 public:
  explicit ForwardingStore(std::shared_ptr<store::Store> inner) : inner_(std::move(inner)) {}

  void set(const std::string& key, std::string_view value) override { inner_->set(key, value); }
  std::string get(const std::string& key) override { return inner_->get(key); }
  std::string compare_set(const std::string& key, std::string_view expected, std::string_view desired) override {
    return inner_->compare_set(key, expected, desired);
  }
  std::int64_t add(const std::string& key, std::int64_t delta) override { return inner_->add(key, delta); }
  bool check(const std::vector<std::string>& keys) override { return inner_->check(keys); }
  using store::Store::wait;
  void wait(const std::vector<std::string>& keys, store::Duration timeout) override { inner_->wait(keys, timeout); }
  std::int64_t num_keys() override { return inner_->num_keys(); }
  bool delete_key(const std::string& key) override { return inner_->delete_key(key); }
  void append(const std::string& key, std::string_view value) override { inner_->append(key, value); }
  std::vector<std::string> multi_get(const std::vector<std::string>& keys) override { return inner_->multi_get(keys); }
  void multi_set(const std::vector<std::string>& keys, const std::vector<std::string>& values) override {
    inner_->multi_set(keys, values);
  }
  void queue_push(const std::string& key, std::string_view value) override { inner_->queue_push(key, value); }
  std::optional<std::string> queue_pop(const std::string& key, bool block) override {
    return inner_->queue_pop(key, block);
  }
  std::int64_t queue_len(const std::string& key) override { return inner_->queue_len(key); }
  std::vector<std::string> list_keys() override { return inner_->list_keys(); }
  void barrier(const std::string& key, std::int64_t world_size, store::Duration timeout) override {
    inner_->barrier(key, world_size, timeout);
  }
  bool append_on_close(const std::string& key, std::string_view on_close, std::string_view on_reconnect) override {
    return inner_->append_on_close(key, on_close, on_reconnect);
  }
  void cancel_on_close(const std::string& key) override { inner_->cancel_on_close(key); }
  store::Duration timeout() const override { return inner_->timeout(); }
  void set_timeout(store::Duration timeout) override { inner_->set_timeout(timeout); }

 protected:
  store::Store& inner() { return *inner_; }

 private:
  std::shared_ptr<store::Store> inner_;
};

}  // namespace ctrun::test
