#pragma once
// A small synchronous client of etcd's v3 API through its HTTP/JSON gateway (POST /v3/kv/range, /v3/kv/put,
// /v3/kv/deleterange, /v3/kv/txn, /v3/lease/grant|keepalive|revoke, /v3/watch), so no gRPC is needed: every etcd
// >= 3.4 serves it on its client URLs. Keys and values are byte strings.
//
// It composes the parts of etcd/: the JSON mapping (etcd_json.hpp), the HTTP/TLS connection (etcd_transport.hpp)
// and the failover between members (endpoint_failover.hpp): a transient failure (connection refused or reset, no
// answer within attempt_timeout, "no leader", "request timed out") is retried on the next member until
// request_timeout has passed; then a store::StoreError names every endpoint and the last error. Errors etcd gives
// for the request itself (lease not found, bad request) are EtcdError at once. A retried txn may have been applied
// before its answer was lost: callers' txns are compare-and-swaps, which at worst apply once and then report a
// mismatch. Thread-safe: one connection per client, used under a mutex; every watch opens a connection of its own.

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "rendezvous/etcd/etcd_error.hpp"
#include "rendezvous/etcd/etcd_kv.hpp"
#include "rendezvous/etcd/etcd_options.hpp"
#include "store/store.hpp"

namespace ctrun::rdzv::etcd {

// HTTP bytes this process exchanged with etcd so far (requests, answers, watch bodies): for rdzv_bench.
std::uint64_t wire_bytes();

class Client {
 public:
  explicit Client(Options options);
  ~Client();
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  // revision > 0: the keys as they were at that revision (until etcd compacts it).
  RangeResult range(const std::string& key, const std::string& range_end = {}, bool keys_only = false,
                    bool count_only = false, std::int64_t revision = 0);
  std::int64_t put(const std::string& key, const std::string& value, std::int64_t lease = 0);
  std::int64_t delete_range(const std::string& key, const std::string& range_end = {});  // number deleted
  TxnResult txn(const std::vector<Compare>& compare, const std::vector<Op>& success, const std::vector<Op>& failure);

  std::int64_t lease_grant(std::chrono::seconds ttl);  // the new lease's id
  std::int64_t lease_keep_alive(std::int64_t id);      // its TTL in seconds; 0: the lease does not exist
  void lease_revoke(std::int64_t id);

  // Blocks until a PUT of `key` at a revision >= start_revision is seen, or `deadline` passes (false). A lost
  // member is not fatal: the watch moves to the next endpoint and resumes from the last revision it saw.
  // Throws store::StoreError when no endpoint answers within request_timeout.
  bool watch_put(const std::string& key, std::int64_t start_revision, store::Clock::time_point deadline);

  // From any thread: the request under way gives up after its current try, and later ones fail at once
  // (EndpointFailover::abandon). For an owner that is going away and must not wait request_timeout for a dead cluster.
  void abandon();

  const Options& options() const { return options_; }
  std::string endpoints() const;  // "a:1,b:2" for messages

 private:
  struct Impl;
  Options options_;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ctrun::rdzv::etcd
