// etcd's v3 gateway JSON, both ways, without etcd: requests as the gateway reads them (base64 keys, int64 strings),
// answers as it writes them (zero values left out), and error answers split into final and transient.
#include "rendezvous/etcd/etcd_json.hpp"

#include <gtest/gtest.h>

#include "rendezvous/etcd/etcd_error.hpp"

using namespace ctrun::rdzv::etcd;
using json = nlohmann::json;
using namespace std::chrono_literals;

TEST(EtcdJson, RangeRequestEncodesBytesAndLeavesOutDefaults) {
  auto r = range_request(std::string("a\0b", 3), "", false, false, 0);
  EXPECT_STREQ(r.path, "/v3/kv/range");
  EXPECT_EQ(r.body, (json{{"key", "YQBi"}}));
  r = range_request("/t/", prefix_end("/t/"), true, true, 42);
  EXPECT_EQ(
      r.body,
      (json{{"key", "L3Qv"}, {"range_end", "L3Qw"}, {"keys_only", true}, {"count_only", true}, {"revision", "42"}}));
}

TEST(EtcdJson, PutDeleteLeaseAndWatchRequests) {
  EXPECT_EQ(put_request("k", "v", 0).body, (json{{"key", "aw=="}, {"value", "dg=="}}));
  EXPECT_EQ(put_request("k", "v", 7).body, (json{{"key", "aw=="}, {"value", "dg=="}, {"lease", "7"}}));
  EXPECT_STREQ(delete_range_request("k", "").path, "/v3/kv/deleterange");
  EXPECT_EQ(lease_grant_request(30s).body, (json{{"TTL", "30"}}));
  EXPECT_STREQ(lease_keep_alive_request(5).path, "/v3/lease/keepalive");
  EXPECT_EQ(lease_revoke_request(5).body, (json{{"ID", "5"}}));
  auto w = watch_request("k", 12);
  EXPECT_STREQ(w.path, "/v3/watch");
  EXPECT_EQ(w.body, (json{{"create_request", {{"key", "aw=="}, {"start_revision", "12"}}}}));
}

TEST(EtcdJson, TxnRequestHasEveryCompareAndBranch) {
  auto r = txn_request({Compare{Compare::Target::kCreate, "k", 0, {}}, Compare{Compare::Target::kValue, "k", 0, "v"}},
                       {Op::put("k", "v", 9, true)},
                       {Op::get("k", true), Op{Op::Kind::kDelete, "k", {}, 0, "l", false, false}});
  EXPECT_STREQ(r.path, "/v3/kv/txn");
  EXPECT_EQ(r.body["compare"][0],
            (json{{"key", "aw=="}, {"result", "EQUAL"}, {"target", "CREATE"}, {"create_revision", "0"}}));
  EXPECT_EQ(r.body["compare"][1], (json{{"key", "aw=="}, {"result", "EQUAL"}, {"target", "VALUE"}, {"value", "dg=="}}));
  EXPECT_EQ(r.body["success"][0],
            (json{{"request_put", {{"key", "aw=="}, {"value", "dg=="}, {"lease", "9"}, {"prev_kv", true}}}}));
  EXPECT_EQ(r.body["failure"][0], (json{{"request_range", {{"key", "aw=="}, {"keys_only", true}}}}));
  EXPECT_EQ(r.body["failure"][1], (json{{"request_delete_range", {{"key", "aw=="}, {"range_end", "bA=="}}}}));
}

TEST(EtcdJson, ReadsAnswersWithZeroValuesLeftOut) {
  auto range = read_range(parse_answer(
      R"({"header":{"revision":"8"},"kvs":[{"key":"YQBi","value":"dg==","create_revision":"3","mod_revision":"5",)"
      R"("version":"2","lease":"7"},{"key":"aw=="}],"count":"2"})"));
  EXPECT_EQ(range.revision, 8);
  EXPECT_EQ(range.count, 2);
  ASSERT_EQ(range.kvs.size(), 2u);
  EXPECT_EQ(range.kvs[0].key, std::string("a\0b", 3));
  EXPECT_EQ(range.kvs[0].value, "v");
  EXPECT_EQ(range.kvs[0].create_revision, 3);
  EXPECT_EQ(range.kvs[0].mod_revision, 5);
  EXPECT_EQ(range.kvs[0].version, 2);
  EXPECT_EQ(range.kvs[0].lease, 7);
  EXPECT_EQ(range.kvs[1].value, "");
  EXPECT_EQ(range.kvs[1].mod_revision, 0);
  EXPECT_TRUE(read_range(parse_answer(R"({"header":{}})")).kvs.empty());
  EXPECT_EQ(read_revision(parse_answer(R"({"header":{"revision":"9"}})")), 9);
  EXPECT_EQ(read_deleted(parse_answer(R"({"header":{},"deleted":"3"})")), 3);
  EXPECT_EQ(read_deleted(parse_answer(R"({"header":{}})")), 0);
}

TEST(EtcdJson, ReadsTxnBranchRangesAndPrevKv) {
  auto t = read_txn(
      parse_answer(R"({"header":{"revision":"11"},"succeeded":true,"responses":[)"
                   R"({"response_put":{"header":{},"prev_kv":{"key":"aw==","value":"b2xk","mod_revision":"4"}}},)"
                   R"({"response_range":{"header":{},"kvs":[{"key":"aw==","value":"bmV3"}],"count":"1"}}]})"));
  EXPECT_TRUE(t.succeeded);
  EXPECT_EQ(t.revision, 11);
  ASSERT_TRUE(t.prev_kv);
  EXPECT_EQ(t.prev_kv->value, "old");
  EXPECT_EQ(t.prev_kv->mod_revision, 4);
  ASSERT_EQ(t.ranges.size(), 1u);
  EXPECT_EQ(t.ranges[0].kvs.at(0).value, "new");
  EXPECT_EQ(t.ranges[0].revision, 11);  // the txn's own revision
  t = read_txn(parse_answer(R"({"header":{"revision":"2"}})"));
  EXPECT_FALSE(t.succeeded);
  EXPECT_FALSE(t.prev_kv);
}

TEST(EtcdJson, ReadsLeaseAnswers) {
  EXPECT_EQ(read_lease_grant(parse_answer(R"({"header":{},"ID":"694","TTL":"30"})")), 694);
  EXPECT_EQ(read_lease_grant(parse_answer(R"({"ID":"12","error":""})")), 12);
  EXPECT_THROW(read_lease_grant(parse_answer(R"({"error":"too many leases"})")), ctrun::store::StoreError);
  EXPECT_EQ(read_lease_ttl(parse_answer(R"({"result":{"ID":"12","TTL":"25"}})")), 25);
  EXPECT_EQ(read_lease_ttl(parse_answer(R"({"result":{"ID":"12"}})")), 0);  // the lease is gone
}

TEST(EtcdJson, ReadsWatchMessages) {
  auto m = read_watch_message(R"({"result":{"header":{},"created":true}})");
  EXPECT_FALSE(m.put_seen);
  EXPECT_EQ(m.next_revision, 0);
  m = read_watch_message(R"({"result":{"events":[{"type":"DELETE","kv":{"mod_revision":"7"}},)"
                         R"({"kv":{"key":"aw==","mod_revision":"9"}}]}})");
  EXPECT_TRUE(m.put_seen);  // the gateway leaves out type PUT, enum value 0
  EXPECT_EQ(m.next_revision, 10);
  m = read_watch_message(R"({"result":{"events":[{"type":"DELETE","kv":{"mod_revision":"7"}}]}})");
  EXPECT_FALSE(m.put_seen);
  m = read_watch_message(
      R"({"result":{"canceled":true,"cancel_reason":"mvcc: required revision has been compacted","compact_revision":"50"}})");
  EXPECT_TRUE(m.canceled);
  EXPECT_EQ(m.compact_revision, 50);
  EXPECT_THROW(read_watch_message("data: {"), TransientError);
  try {
    read_watch_message(R"({"error":{"grpc_code":14,"http_code":503,"message":"no leader"}})");
    ADD_FAILURE() << "no exception";
  } catch (const TransientError& e) {
    EXPECT_STREQ(e.what(), "HTTP 200: no leader (UNAVAILABLE)");
  }
  EXPECT_THROW(read_watch_message(R"({"error":{"grpc_code":5,"message":"gone"}})"), EtcdError);
}

TEST(EtcdJson, ErrorAnswersAreFinalOnlyForRequestErrors) {
  try {
    throw_error_answer(
        404, R"({"error":"etcdserver: requested lease not found","code":5,"message":"requested lease not found"})");
    ADD_FAILURE() << "no exception";
  } catch (const EtcdError& e) {
    EXPECT_EQ(e.code(), GrpcStatus::kNotFound);
    EXPECT_STREQ(e.what(), "requested lease not found");
  }
  try {
    throw_error_answer(503, R"({"error":"etcdserver: no leader","code":14,"message":"etcdserver: no leader"})");
    ADD_FAILURE() << "no exception";
  } catch (const TransientError& e) {
    EXPECT_STREQ(e.what(), "HTTP 503: etcdserver: no leader (UNAVAILABLE)");
  }
  EXPECT_THROW(throw_error_answer(502, "<html>Bad Gateway</html>"), TransientError);
  EXPECT_THROW(parse_answer("<html>"), TransientError);
  EXPECT_THROW(parse_answer("[1]"), TransientError);
}

TEST(EtcdKv, PrefixEnd) {
  EXPECT_EQ(prefix_end("/ctrun/"), "/ctrun0");
  EXPECT_EQ(prefix_end(std::string("a\xff", 2)), "b");
  EXPECT_EQ(prefix_end(""), std::string(1, '\0'));  // every key
}
