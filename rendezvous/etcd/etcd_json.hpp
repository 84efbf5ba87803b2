#pragma once
// etcd's v3 HTTP/JSON gateway as pure functions: every request as the path and JSON body to POST, every answer read
// back into etcd_kv.hpp's values, every error answer turned into the exception that says whether to fail over.
// The gateway base64-encodes keys and values, writes int64 fields as strings and leaves out zero values.

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "rendezvous/etcd/etcd_kv.hpp"

namespace ctrun::rdzv::etcd {

struct Request {
  const char* path;  // "/v3/kv/range"
  nlohmann::json body;
};

// revision > 0: the keys as they were at that revision.
Request range_request(const std::string& key, const std::string& range_end, bool keys_only, bool count_only,
                      std::int64_t revision);
Request put_request(const std::string& key, const std::string& value, std::int64_t lease);
Request delete_range_request(const std::string& key, const std::string& range_end);
Request txn_request(const std::vector<Compare>& compare, const std::vector<Op>& success,
                    const std::vector<Op>& failure);
Request lease_grant_request(std::chrono::seconds ttl);
Request lease_keep_alive_request(std::int64_t id);
Request lease_revoke_request(std::int64_t id);
// A watch of PUTs and DELETEs of `key` from start_revision on; its answer is a stream of watch messages.
Request watch_request(const std::string& key, std::int64_t start_revision);

// An answer's text as a JSON object; TransientError when it is none (a cut answer, a proxy's page): another member
// may answer properly.
nlohmann::json parse_answer(const std::string& text);

RangeResult read_range(const nlohmann::json& answer);
std::int64_t read_revision(const nlohmann::json& answer);  // the store's revision after a put
std::int64_t read_deleted(const nlohmann::json& answer);   // how many keys a delete_range removed
TxnResult read_txn(const nlohmann::json& answer);
std::int64_t read_lease_grant(const nlohmann::json& answer);  // the new lease's id; store::StoreError if refused
std::int64_t read_lease_ttl(const nlohmann::json& answer);    // keep-alive: seconds left, 0 for a lease gone

// One message of a watch stream (one line of the gateway's streamed answer).
struct WatchMessage {
  std::int64_t next_revision = 0;  // one past the last event's revision; 0 without events
  bool put_seen = false;           // one of the events is a PUT
  bool canceled = false;           // etcd ended the watch (its start revision was compacted, ...)
  std::string cancel_reason;
  std::int64_t compact_revision = 0;
};
// Throws as throw_error_answer for an error message, TransientError for a line that is not a JSON object.
WatchMessage read_watch_message(const std::string& line);

// An error answer (HTTP status != 200, or a stream's error message): EtcdError when etcd refused the request itself
// (is_request_error), else TransientError.
[[noreturn]] void throw_error_answer(unsigned http_status, const std::string& body);

}  // namespace ctrun::rdzv::etcd
