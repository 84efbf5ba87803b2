#pragma once
// A Store decorator that counts operations and payload bytes (keys + values, both directions): how the tests and
// rdzv_bench measure the store traffic of a round. Thread-safe; wraps any Store.

#include <atomic>
#include <memory>

#include "store/store.hpp"

namespace ctrun::store {

struct StoreTraffic {
  std::atomic<std::uint64_t> ops{0};
  std::atomic<std::uint64_t> bytes{0};
};

class CountingStore final : public Store {
 public:
  CountingStore(std::shared_ptr<Store> inner, std::shared_ptr<StoreTraffic> traffic)
      : inner_(std::move(inner)), t_(std::move(traffic)) {}

  void set(const std::string& key, std::string_view value) override {
    count(key.size() + value.size());
    inner_->set(key, value);
  }
  std::string get(const std::string& key) override { return counted(key.size(), inner_->get(key)); }
  std::string compare_set(const std::string& key, std::string_view expected, std::string_view desired) override {
    return counted(key.size() + expected.size() + desired.size(), inner_->compare_set(key, expected, desired));
  }
  std::int64_t add(const std::string& key, std::int64_t delta) override {
    count(key.size() + 16);
    return inner_->add(key, delta);
  }
  bool check(const std::vector<std::string>& keys) override {
    count(total(keys));
    return inner_->check(keys);
  }
  void wait(const std::vector<std::string>& keys, store::Duration timeout) override {
    count(total(keys));
    inner_->wait(keys, timeout);
  }
  using Store::wait;
  std::int64_t num_keys() override { return count(8), inner_->num_keys(); }
  bool delete_key(const std::string& key) override { return count(key.size()), inner_->delete_key(key); }
  void append(const std::string& key, std::string_view value) override {
    count(key.size() + value.size());
    inner_->append(key, value);
  }
  std::vector<std::string> multi_get(const std::vector<std::string>& keys) override {
    auto values = inner_->multi_get(keys);
    count(total(keys) + total(values));
    return values;
  }
  void multi_set(const std::vector<std::string>& keys, const std::vector<std::string>& values) override {
    count(total(keys) + total(values));
    inner_->multi_set(keys, values);
  }
  void queue_push(const std::string& key, std::string_view value) override {
    count(key.size() + value.size());
    inner_->queue_push(key, value);
  }
  std::optional<std::string> queue_pop(const std::string& key, bool block) override {
    auto v = inner_->queue_pop(key, block);
    count(key.size() + (v ? v->size() : 0));
    return v;
  }
  std::int64_t queue_len(const std::string& key) override { return count(key.size()), inner_->queue_len(key); }
  std::vector<std::string> list_keys() override {
    auto keys = inner_->list_keys();
    count(total(keys));
    return keys;
  }
  void barrier(const std::string& key, std::int64_t world_size, store::Duration timeout) override {
    count(key.size() + 8);
    inner_->barrier(key, world_size, timeout);
  }
  bool append_on_close(const std::string& key, std::string_view on_close, std::string_view on_reconnect) override {
    count(key.size() + on_close.size() + 8);
    return inner_->append_on_close(key, on_close, on_reconnect);
  }
  void cancel_on_close(const std::string& key) override { count(key.size() + 8), inner_->cancel_on_close(key); }
  bool append_on_silence(const std::string& key, std::string_view on_silence, std::string_view on_back,
                         Duration timeout) override {
    count(key.size() + on_silence.size() + on_back.size() + 8);
    return inner_->append_on_silence(key, on_silence, on_back, timeout);
  }
  void cancel_on_silence(const std::string& key) override { count(key.size() + 8), inner_->cancel_on_silence(key); }
  std::vector<std::optional<std::string>> peek(const std::vector<std::string>& keys,
                                               std::string_view sentinel) override {
    auto values = inner_->peek(keys, sentinel);
    t_->ops += keys.size();
    std::uint64_t bytes = total(keys) + 2 * keys.size() * sentinel.size();
    for (const auto& v : values) bytes += v ? v->size() : sentinel.size();
    t_->bytes += bytes;
    return values;
  }
  std::shared_ptr<AsyncWait> wait_async(const std::vector<std::string>& keys, WaitDone done) override {
    count(total(keys));
    return inner_->wait_async(keys, std::move(done));
  }
  store::Duration timeout() const override { return inner_->timeout(); }
  void set_timeout(store::Duration timeout) override { inner_->set_timeout(timeout); }

 private:
  static std::uint64_t total(const std::vector<std::string>& v) {
    std::uint64_t n = 0;
    for (const auto& s : v) n += s.size();
    return n;
  }
  void count(std::uint64_t bytes) {
    t_->ops++;
    t_->bytes += bytes;
  }
  std::string counted(std::uint64_t sent, std::string reply) {
    count(sent + reply.size());
    return reply;
  }

  std::shared_ptr<Store> inner_;
  std::shared_ptr<StoreTraffic> t_;
};

}  // namespace ctrun::store
