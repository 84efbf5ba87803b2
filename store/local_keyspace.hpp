#pragma once
// The keyspace as the in-process stores use it (MemoryStore under its mutex, FileStore replaying its log
// under the file lock): one caller (kLocalConn), no memory or reply limits, and no connections to tell about
// released waiters or watched keys (the stores' own waits ask check()). A refused command throws StoreError
// with the keyspace's reason (checked), and a command the keyspace runs in slices is run to its end here, once
// (run_multi_get, run_multi_set).

#include <string>
#include <vector>

#include "store/keyspace.hpp"
#include "store/store.hpp"

namespace ctrun::store::detail {

// r itself, or StoreError with why it was refused (a refused command changed nothing).
template <class R>
const R& checked(const R& r) {
  if (!r.ok()) throw StoreError(r.refused);
  return r;
}

// MULTI_GET to its end: the values of keys, in order; StoreError when one is missing.
std::vector<std::string> run_multi_get(Keyspace& ks, const std::vector<std::string>& keys);
// MULTI_SET to its end; StoreError if refused.
void run_multi_set(Keyspace& ks, const std::vector<std::string>& keys, const std::vector<std::string>& values);

// A keyspace with nothing to tell: no limits, events ignored.
class LocalKeyspace final : private KeyspaceEvents {
 public:
  LocalKeyspace() : keyspace_(*this, UINT64_MAX, UINT64_MAX) {}
  LocalKeyspace(const LocalKeyspace&) = delete;
  LocalKeyspace& operator=(const LocalKeyspace&) = delete;

  Keyspace& keyspace() { return keyspace_; }
  const Keyspace& keyspace() const { return keyspace_; }

 private:
  void waiter_released(ConnId) override {}
  void key_changed(ConnId, KeyChange, const std::string&, const BlobPtr&, const BlobPtr&) override {}
  std::uint64_t unread_reply_bytes(ConnId) override { return 0; }

  Keyspace keyspace_;
};

}  // namespace ctrun::store::detail
