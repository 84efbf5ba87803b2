#pragma once
// store::Store on etcd v3: the storage of the rendezvous state machine (join_op.cpp, liveness.cpp), which is written
// once for every backend. Key "ctrun.rdzv.<run_id>/<rest>" (rendezvous/keys.hpp) lives at etcd key
// "/ctrun/<run_id>/<rest>"; any other key k at "/ctrun/k". Every write is bound to the run's lease (etcd_lease.hpp),
// when one is given.
//
//   set, multi_set        PUT / one txn of PUTs (in chunks of 128: etcd's default --max-txn-ops)
//   get, multi_get, wait  RANGE; a missing key is awaited with a WATCH from the revision of that RANGE: no polling
//   compare_set           txn: compare value (or create_revision == 0 when `expected` is empty), PUT, else RANGE
//   add                   a counter is "\x01ctr:<offset>", its value the key's version - offset: concurrent `add 1`s
//                         write the same bytes (compare on them), so none loses a race; other deltas CAS on the
//                         mod_revision. Also writes "<key>#w<writer>" so a txn retried after a lost answer is
//                         never applied twice. get/multi_get/compare_set return a counter's decimal value.
//   append                read-modify-write txn on the key's mod_revision, retried on a lost race
//   check                 one txn of RANGEs (keys only)
//   delete_key, list_keys, num_keys, barrier   DELETE / RANGE of the namespace / ADD + WAIT
// queue_push/queue_pop/queue_len (torch >= 2.8 worker queues) are not needed by the rendezvous: they throw.

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "rendezvous/etcd/etcd_client.hpp"
#include "rendezvous/etcd/etcd_lease.hpp"
#include "store/store.hpp"

namespace ctrun::rdzv::etcd {

inline constexpr const char* kNamespace = "/ctrun/";

class EtcdStore final : public store::Store {
 public:
  // `lease` may be null (no TTL: tests of the store itself).
  EtcdStore(std::shared_ptr<Client> client, std::shared_ptr<RunLease> lease,
            store::Duration timeout = store::kDefaultTimeout);

  // "ctrun.rdzv.<id>/x" -> "/ctrun/<id>/x" (and back).
  static std::string to_etcd(const std::string& key);
  static std::string from_etcd(const std::string& key);

  void set(const std::string& key, std::string_view value) override;
  std::string get(const std::string& key) override;
  std::string compare_set(const std::string& key, std::string_view expected, std::string_view desired) override;
  std::int64_t add(const std::string& key, std::int64_t delta) override;
  bool check(const std::vector<std::string>& keys) override;
  void wait(const std::vector<std::string>& keys, store::Duration timeout) override;
  using Store::wait;
  std::int64_t num_keys() override;
  bool delete_key(const std::string& key) override;
  void append(const std::string& key, std::string_view value) override;
  std::vector<std::string> multi_get(const std::vector<std::string>& keys) override;
  void multi_set(const std::vector<std::string>& keys, const std::vector<std::string>& values) override;
  void queue_push(const std::string& key, std::string_view value) override;
  std::optional<std::string> queue_pop(const std::string& key, bool block) override;
  std::int64_t queue_len(const std::string& key) override;
  std::vector<std::string> list_keys() override;
  void barrier(const std::string& key, std::int64_t world_size, store::Duration timeout) override;
  store::Duration timeout() const override { return timeout_; }
  void set_timeout(store::Duration timeout) override { timeout_ = timeout; }

 private:
  std::int64_t lease_id() const { return lease_ ? lease_->id() : 0; }
  // Runs a write; if etcd says the run lease is gone, renews it once and runs the write again.
  template <class F>
  auto with_lease(F write);
  // Read-modify-write of one key: next(current value or nullopt) -> new value. Returns the new value.
  std::string update(const std::string& key, const std::function<std::string(const std::optional<std::string>&)>& next);
  std::vector<std::optional<std::string>> read(const std::vector<std::string>& keys, bool keys_only);

  std::shared_ptr<Client> client_;
  std::shared_ptr<RunLease> lease_;
  store::Duration timeout_;
  std::string writer_;  // names this store's marker keys (update())
  std::atomic<std::uint64_t> writes_{0};
  std::mutex markers_mutex_;
  std::map<std::string, std::int64_t> marker_revs_;  // add(): our marker keys' revisions as we last wrote them
};

}  // namespace ctrun::rdzv::etcd
