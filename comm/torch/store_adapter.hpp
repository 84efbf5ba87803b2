#pragma once
// A part of ctrun_torch.cpp's one translation unit (see there), not a header to include elsewhere.

#include <torch/csrc/distributed/c10d/Store.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "store/store.hpp"

namespace ctrun::comm::torch_backend {
namespace {

// comm's store interface over torch's c10d::Store (a PrefixStore of the group). Ops c10d::Store lacks on 1.13
// are composed from the ones it has; queues are not needed by comm's cpu backend and say so.
class StoreAdapter final : public store::Store {
 public:
  explicit StoreAdapter(c10::intrusive_ptr<c10d::Store> store) : store_(std::move(store)) {}

  void set(const std::string& key, std::string_view value) override { store_->set(key, bytes(value)); }
  std::string get(const std::string& key) override { return str(store_->get(key)); }
  std::string compare_set(const std::string& key, std::string_view expected, std::string_view desired) override {
    return str(store_->compareSet(key, bytes(expected), bytes(desired)));
  }
  std::int64_t add(const std::string& key, std::int64_t delta) override { return store_->add(key, delta); }
  bool check(const std::vector<std::string>& keys) override { return store_->check(keys); }
  void wait(const std::vector<std::string>& keys, store::Duration timeout) override {
    try {
      store_->wait(keys, timeout);
    } catch (const std::exception& e) {
      throw store::TimeoutError(e.what());
    }
  }
  std::int64_t num_keys() override { return store_->getNumKeys(); }
  bool delete_key(const std::string& key) override { return store_->deleteKey(key); }
  void append(const std::string& key, std::string_view value) override {
    // c10d::Store 1.13 has no append: a compare_set loop gives the same result.
    for (;;) {
      std::string old = store_->check({key}) ? get(key) : std::string();
      std::string desired = old + std::string(value);
      if (compare_set(key, old, desired) == desired) return;
    }
  }
  std::vector<std::string> multi_get(const std::vector<std::string>& keys) override {
    std::vector<std::string> values;
    values.reserve(keys.size());
    for (const auto& k : keys) values.push_back(get(k));
    return values;
  }
  void multi_set(const std::vector<std::string>& keys, const std::vector<std::string>& values) override {
    if (keys.size() != values.size()) throw store::StoreError("multi_set: keys and values differ in length");
    for (std::size_t i = 0; i < keys.size(); ++i) set(keys[i], values[i]);
  }
  void queue_push(const std::string&, std::string_view) override { unsupported("queue_push"); }
  std::optional<std::string> queue_pop(const std::string&, bool) override { unsupported("queue_pop"); }
  std::int64_t queue_len(const std::string&) override { unsupported("queue_len"); }
  std::vector<std::string> list_keys() override { unsupported("list_keys"); }
  void barrier(const std::string& key, std::int64_t world_size, store::Duration timeout) override {
    // The counter's last arrival releases everyone through a second key.
    if (add(key + "/arrived", 1) == world_size) set(key + "/done", "1");
    wait({key + "/done"}, timeout);
  }
  store::Duration timeout() const override { return store_->getTimeout(); }
  void set_timeout(store::Duration timeout) override { store_->setTimeout(timeout); }

 private:
  static std::vector<uint8_t> bytes(std::string_view s) { return {s.begin(), s.end()}; }
  static std::string str(const std::vector<uint8_t>& v) { return {v.begin(), v.end()}; }
  [[noreturn]] static void unsupported(const char* what) {
    throw store::StoreError(std::string("ctrun_torch: torch's c10d::Store has no ") + what);
  }
  c10::intrusive_ptr<c10d::Store> store_;
};

}  // namespace
}  // namespace ctrun::comm::torch_backend
