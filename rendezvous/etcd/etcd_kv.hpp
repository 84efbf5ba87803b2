#pragma once
// etcd's key-value data as the client's callers see it: keys and values are byte strings, revisions are etcd's.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace ctrun::rdzv::etcd {

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

// The end of the range of every key starting with prefix (etcd's "prefix + 1").
std::string prefix_end(std::string prefix);

}  // namespace ctrun::rdzv::etcd
