#include "rendezvous/etcd/etcd_json.hpp"

#include <algorithm>

#include <fmt/format.h>
#include <boost/beast/core/detail/base64.hpp>

#include "rendezvous/etcd/etcd_error.hpp"

namespace ctrun::rdzv::etcd {
namespace {

using json = nlohmann::json;
namespace base64 = boost::beast::detail::base64;

std::string b64(const std::string& s) {
  std::string out(base64::encoded_size(s.size()), '\0');
  out.resize(base64::encode(out.data(), s.data(), s.size()));
  return out;
}

std::string unb64(const std::string& s) {
  std::string out(base64::decoded_size(s.size()), '\0');
  out.resize(base64::decode(out.data(), s.data(), s.size()).first);
  return out;
}

// An int64 field: a string on the wire, absent when zero.
std::int64_t i64(const json& j, const char* field) {
  auto it = j.find(field);
  if (it == j.end() || it->is_null()) return 0;
  if (it->is_string()) return std::stoll(it->get<std::string>());
  return it->get<std::int64_t>();
}

std::int64_t header_revision(const json& answer) {
  auto it = answer.find("header");
  return it == answer.end() ? 0 : i64(*it, "revision");
}

KeyValue to_key_value(const json& kv) {
  return KeyValue{unb64(kv.value("key", "")), unb64(kv.value("value", "")), i64(kv, "create_revision"),
                  i64(kv, "mod_revision"),    i64(kv, "version"),           i64(kv, "lease")};
}

// A key and, when set, the end of its range: the body every range and delete request starts from.
json key_range(const std::string& key, const std::string& range_end) {
  json j{{"key", b64(key)}};
  if (!range_end.empty()) j["range_end"] = b64(range_end);
  return j;
}

json op_json(const Op& op) {
  switch (op.kind) {
    case Op::Kind::kPut: {
      json put{{"key", b64(op.key)}, {"value", b64(op.value)}};
      if (op.lease) put["lease"] = std::to_string(op.lease);
      if (op.prev_kv) put["prev_kv"] = true;
      return json{{"request_put", put}};
    }
    case Op::Kind::kRange: {
      json range = key_range(op.key, op.range_end);
      if (op.keys_only) range["keys_only"] = true;
      return json{{"request_range", range}};
    }
    case Op::Kind::kDelete:
      return json{{"request_delete_range", key_range(op.key, op.range_end)}};
  }
  return {};
}

json compare_json(const Compare& c) {
  json j{{"key", b64(c.key)}, {"result", "EQUAL"}};
  switch (c.target) {
    case Compare::Target::kCreate:
      j["target"] = "CREATE";
      j["create_revision"] = std::to_string(c.revision);
      break;
    case Compare::Target::kMod:
      j["target"] = "MOD";
      j["mod_revision"] = std::to_string(c.revision);
      break;
    case Compare::Target::kValue:
      j["target"] = "VALUE";
      j["value"] = b64(c.value);
      break;
  }
  return j;
}

}  // namespace

Request range_request(const std::string& key, const std::string& range_end, bool keys_only, bool count_only,
                      std::int64_t revision) {
  json body = key_range(key, range_end);
  if (revision > 0) body["revision"] = std::to_string(revision);
  if (keys_only) body["keys_only"] = true;
  if (count_only) body["count_only"] = true;
  return {"/v3/kv/range", std::move(body)};
}

Request put_request(const std::string& key, const std::string& value, std::int64_t lease) {
  json body{{"key", b64(key)}, {"value", b64(value)}};
  if (lease) body["lease"] = std::to_string(lease);
  return {"/v3/kv/put", std::move(body)};
}

Request delete_range_request(const std::string& key, const std::string& range_end) {
  return {"/v3/kv/deleterange", key_range(key, range_end)};
}

Request txn_request(const std::vector<Compare>& compare, const std::vector<Op>& success,
                    const std::vector<Op>& failure) {
  json body{{"compare", json::array()}, {"success", json::array()}, {"failure", json::array()}};
  for (const auto& c : compare) body["compare"].push_back(compare_json(c));
  for (const auto& op : success) body["success"].push_back(op_json(op));
  for (const auto& op : failure) body["failure"].push_back(op_json(op));
  return {"/v3/kv/txn", std::move(body)};
}

Request lease_grant_request(std::chrono::seconds ttl) {
  return {"/v3/lease/grant", json{{"TTL", std::to_string(ttl.count())}}};
}

Request lease_keep_alive_request(std::int64_t id) { return {"/v3/lease/keepalive", json{{"ID", std::to_string(id)}}}; }

Request lease_revoke_request(std::int64_t id) { return {"/v3/lease/revoke", json{{"ID", std::to_string(id)}}}; }

Request watch_request(const std::string& key, std::int64_t start_revision) {
  return {"/v3/watch",
          json{{"create_request", {{"key", b64(key)}, {"start_revision", std::to_string(start_revision)}}}}};
}

json parse_answer(const std::string& text) {
  json j = json::parse(text, nullptr, false);
  if (!j.is_object()) throw TransientError("unreadable answer: " + text.substr(0, 200));
  return j;
}

RangeResult read_range(const json& answer) {
  RangeResult r;
  r.revision = header_revision(answer);
  r.count = i64(answer, "count");
  if (auto it = answer.find("kvs"); it != answer.end())
    for (const auto& kv : *it) r.kvs.push_back(to_key_value(kv));
  return r;
}

std::int64_t read_revision(const json& answer) { return header_revision(answer); }

std::int64_t read_deleted(const json& answer) { return i64(answer, "deleted"); }

TxnResult read_txn(const json& answer) {
  TxnResult t;
  t.succeeded = answer.value("succeeded", false);
  t.revision = header_revision(answer);
  auto responses = answer.find("responses");
  if (responses == answer.end()) return t;
  for (const auto& response : *responses) {
    if (auto put = response.find("response_put"); put != response.end() && !t.prev_kv && put->contains("prev_kv"))
      t.prev_kv = to_key_value(put->at("prev_kv"));
    if (auto range = response.find("response_range"); range != response.end()) {
      auto r = read_range(*range);
      if (!r.revision) r.revision = t.revision;  // a txn's ranges carry no header of their own
      t.ranges.push_back(std::move(r));
    }
  }
  return t;
}

std::int64_t read_lease_grant(const json& answer) {
  if (auto error = answer.value("error", std::string()); !error.empty())
    throw store::StoreError("etcd lease grant failed: " + error);
  return i64(answer, "ID");
}

std::int64_t read_lease_ttl(const json& answer) {
  if (auto it = answer.find("error"); it != answer.end())
    throw store::StoreError("etcd lease keep-alive failed: " + it->dump());
  return i64(answer.value("result", json::object()), "TTL");
}

WatchMessage read_watch_message(const std::string& line) {
  json j = json::parse(line, nullptr, false);
  if (!j.is_object()) throw TransientError("unreadable watch message: " + line.substr(0, 200));
  if (j.contains("error")) throw_error_answer(200, line);
  const auto& result = j.value("result", json::object());
  WatchMessage m;
  m.canceled = result.value("canceled", false);
  m.cancel_reason = result.value("cancel_reason", "");
  m.compact_revision = i64(result, "compact_revision");
  for (const auto& event : result.value("events", json::array())) {
    m.next_revision = std::max(m.next_revision, i64(event.value("kv", json::object()), "mod_revision") + 1);
    if (event.value("type", "PUT") == "PUT") m.put_seen = true;
  }
  return m;
}

void throw_error_answer(unsigned http_status, const std::string& body) {
  // A unary error is {"error": text, "code": n, "message": text}; a stream's is {"error": {"grpc_code": n, ...}}.
  json j = json::parse(body, nullptr, false);
  if (j.is_object() && j.contains("error") && j["error"].is_object()) j = j["error"];
  if (!j.is_object()) j = json::object();
  const auto text = [&](const char* field) {
    auto it = j.find(field);
    return it != j.end() && it->is_string() ? it->get<std::string>() : std::string();
  };
  const auto code = static_cast<GrpcStatus>(j.value("code", j.value("grpc_code", 0)));
  auto message = !text("message").empty() ? text("message") : !text("error").empty() ? text("error") : body;
  if (is_request_error(code)) throw EtcdError(code, message);
  if (code == GrpcStatus::kOk) throw TransientError(fmt::format("HTTP {}: {}", http_status, message));
  throw TransientError(fmt::format("HTTP {}: {} ({})", http_status, message, grpc_status_name(code)));
}

}  // namespace ctrun::rdzv::etcd
