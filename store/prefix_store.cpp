#include "store/prefix_store.hpp"

#include <stdexcept>

#include <fmt/format.h>

#include "store/store_util.hpp"

namespace ctrun::store {

PrefixStore::PrefixStore(std::string prefix, std::shared_ptr<Store> base)
    : prefix_(std::move(prefix)), base_(std::move(base)) {
  if (!base_) throw std::invalid_argument("PrefixStore needs a base store");
}

std::vector<std::string> PrefixStore::join_keys(const std::vector<std::string>& keys) const {
  std::vector<std::string> out;
  out.reserve(keys.size());
  for (const auto& k : keys) out.push_back(join_key(k));
  return out;
}

void PrefixStore::set(const std::string& key, std::string_view value) { base_->set(join_key(key), value); }

std::string PrefixStore::get(const std::string& key) { return base_->get(join_key(key)); }

std::string PrefixStore::compare_set(const std::string& key, std::string_view expected, std::string_view desired) {
  return base_->compare_set(join_key(key), expected, desired);
}

std::int64_t PrefixStore::add(const std::string& key, std::int64_t delta) { return base_->add(join_key(key), delta); }

bool PrefixStore::check(const std::vector<std::string>& keys) { return base_->check(join_keys(keys)); }

void PrefixStore::wait(const std::vector<std::string>& keys, Duration timeout) {
  try {
    base_->wait(join_keys(keys), timeout);
  } catch (const TimeoutError&) {
    // Name the keys as this caller knows them; the joined form is in the base store's log if needed.
    throw TimeoutError(wait_timeout_message(keys, timeout) +
                       fmt::format(" (store prefix '{}')", printable_key(prefix_)));
  }
}

// As PyTorch: the count of the whole underlying store, not just this prefix.
std::int64_t PrefixStore::num_keys() { return base_->num_keys(); }

bool PrefixStore::delete_key(const std::string& key) { return base_->delete_key(join_key(key)); }

void PrefixStore::append(const std::string& key, std::string_view value) { base_->append(join_key(key), value); }

std::vector<std::string> PrefixStore::multi_get(const std::vector<std::string>& keys) {
  return base_->multi_get(join_keys(keys));
}

void PrefixStore::multi_set(const std::vector<std::string>& keys, const std::vector<std::string>& values) {
  check_multi_set_sizes(keys, values);
  base_->multi_set(join_keys(keys), values);
}

void PrefixStore::queue_push(const std::string& key, std::string_view value) {
  base_->queue_push(join_key(key), value);
}

std::optional<std::string> PrefixStore::queue_pop(const std::string& key, bool block) {
  return base_->queue_pop(join_key(key), block);
}

std::int64_t PrefixStore::queue_len(const std::string& key) { return base_->queue_len(join_key(key)); }

std::vector<std::string> PrefixStore::list_keys() {
  // Only this prefix's keys, stripped (as PyTorch's PrefixStore::listKeys); nested stores strip layer by layer.
  const std::string head = prefix_ + "/";
  std::vector<std::string> out;
  for (auto& k : base_->list_keys())
    if (k.size() >= head.size() && k.compare(0, head.size(), head) == 0) out.push_back(k.substr(head.size()));
  return out;
}

void PrefixStore::barrier(const std::string& key, std::int64_t world_size, Duration timeout) {
  base_->barrier(join_key(key), world_size, timeout);
}

Duration PrefixStore::timeout() const { return base_->timeout(); }
void PrefixStore::set_timeout(Duration timeout) { base_->set_timeout(timeout); }

}  // namespace ctrun::store
