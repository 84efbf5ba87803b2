#pragma once
// A small synchronous client of etcd's v3 API through its HTTP/JSON gateway (POST /v3/kv/range, /v3/kv/put,
// /v3/kv/deleterange, /v3/kv/txn, /v3/lease/grant|keepalive|revoke, /v3/watch), so no gRPC is needed: every etcd
// >= 3.4 serves it on its client URLs. Keys and values are byte strings (base64 on the wire, done here).
//
// Fault tolerance: a request that fails for a transient reason (connection refused or reset, no answer within
// attempt_timeout, "no leader", "request timed out") is retried on the next endpoint, with a backoff after each
// full pass over the endpoints, until request_timeout has passed; then a store::StoreError names every endpoint
// and the last error. Errors etcd gives for the request itself (lease not found, bad request) are EtcdError at
// once. A retried txn may have been applied before its answer was lost: callers' txns are compare-and-swaps, which
// at worst apply once and then report a mismatch.
// Beast/Asio/OpenSSL stay in etcd_client.cpp. Thread-safe: one connection per client, used under a mutex; every
// watch opens a connection of its own.

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "rendezvous/parameters.hpp"
#include "store/store.hpp"

namespace ctrun::rdzv::etcd {

inline constexpr std::uint16_t kDefaultPort = 2379;

struct Options {
  std::vector<Endpoint> endpoints;
  bool https = false;
  std::string cacert, cert, key;  // PEM files (https): CA to verify the server, client certificate and key
  store::Duration request_timeout = std::chrono::seconds(60);  // one request, failover and retries included
  store::Duration attempt_timeout = std::chrono::seconds(3);   // one endpoint's answer
  // The run's keys vanish this long after its last agent is gone (etcd_lease.hpp). --rdzv-conf lease_ttl.
  std::chrono::seconds lease_ttl = std::chrono::seconds(600);
};

// --rdzv-endpoint host:port[,host:port...] ("http://" or "https://" in front is accepted) and --rdzv-conf
// protocol=http|https, cacert=, cert=, key=, read_timeout=, lease_ttl=. Throws std::invalid_argument (exit code 2).
Options parse_options(const RendezvousParameters& params);

// An error etcd reported for the request (not a transport failure): code is the gRPC status code.
class EtcdError : public store::StoreError {
 public:
  EtcdError(int code, const std::string& message) : store::StoreError(message), code_(code) {}
  int code() const { return code_; }
  static constexpr int kNotFound = 5;

 private:
  int code_;
};

struct KeyValue {
  std::string key, value;
  std::int64_t create_revision = 0, mod_revision = 0, version = 0, lease = 0;
};

struct RangeResult {
  std::vector<KeyValue> kvs;
  std::int64_t count = 0;
  std::int64_t revision = 0;  // the store's revision when the range was served
};

// One comparison of a txn. Missing keys compare with revision 0 and no value (etcd's rule).
struct Compare {
  enum class Target { kCreate, kMod, kValue } target;
  std::string key;
  std::int64_t revision = 0;  // kCreate, kMod
  std::string value;          // kValue
};

// One operation of a txn branch.
struct Op {
  enum class Kind { kPut, kRange, kDelete } kind;
  std::string key;
  std::string value;       // kPut
  std::int64_t lease = 0;  // kPut
  std::string range_end;   // kRange, kDelete: "" = the key alone
  bool keys_only = false;  // kRange
  bool prev_kv = false;    // kPut: answer with the key as it was before (TxnResult::prev_kv)
  static Op put(std::string k, std::string v, std::int64_t lease = 0, bool prev_kv = false) {
    return Op{Kind::kPut, std::move(k), std::move(v), lease, {}, false, prev_kv};
  }
  static Op get(std::string k, bool keys_only = false) {
    return Op{Kind::kRange, std::move(k), {}, 0, {}, keys_only, false};
  }
};

struct TxnResult {
  bool succeeded = false;
  std::int64_t revision = 0;
  std::vector<RangeResult> ranges;  // the results of the taken branch's range ops, in order
  std::optional<KeyValue> prev_kv;  // the first put with prev_kv that found its key
};

// HTTP bytes this process exchanged with etcd so far (requests, answers, watch bodies): for rdzv_bench.
std::uint64_t wire_bytes();

// The end of the range of every key starting with prefix (etcd's "prefix + 1").
std::string prefix_end(std::string prefix);

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

  const Options& options() const { return options_; }
  std::string endpoints() const;  // "a:1,b:2" for messages

 private:
  struct Impl;
  Options options_;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ctrun::rdzv::etcd
