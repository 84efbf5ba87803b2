// The etcd backend's flag grammar: --rdzv-endpoint lists and --rdzv-conf keys, and the mistakes it refuses.
#include "rendezvous/etcd/etcd_options.hpp"

#include <gtest/gtest.h>

using namespace ctrun::rdzv;
using namespace std::chrono_literals;

namespace {

etcd::Options parse(const std::string& endpoint, std::map<std::string, std::string> config = {}) {
  RendezvousParameters p;
  p.backend = "etcd";
  p.endpoint = endpoint;
  p.config = std::move(config);
  return etcd::parse_options(p);
}

void expect_refused(const std::string& endpoint, std::map<std::string, std::string> config, const std::string& says) {
  try {
    parse(endpoint, std::move(config));
    ADD_FAILURE() << "accepted --rdzv-endpoint " << endpoint;
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find(says), std::string::npos) << e.what();
  }
}

}  // namespace

TEST(EtcdOptions, ParsesEndpointsWithDefaultPortAndIpv6) {
  auto o = parse("127.0.0.1:2379, http://node2/ ,[::1]:4001");
  ASSERT_EQ(o.endpoints.size(), 3u);
  EXPECT_EQ(o.endpoints[0].port, 2379);
  EXPECT_EQ(o.endpoints[1].host, "node2");
  EXPECT_EQ(o.endpoints[1].port, etcd::kDefaultPort);
  EXPECT_EQ(o.endpoints[2].host, "::1");
  EXPECT_EQ(o.endpoints[2].port, 4001);
  EXPECT_FALSE(o.https);
  EXPECT_EQ(o.request_timeout, 60s);
  EXPECT_EQ(o.lease_ttl, 600s);
  EXPECT_EQ(o.member_ttl, 2s);
}

TEST(EtcdOptions, HttpsFromTheSchemeOrProtocolWithTlsFiles) {
  auto o = parse("HTTPS://a:1", {{"cacert", "/ca.pem"}, {"cert", "/c.pem"}, {"key", "/k.pem"}});
  EXPECT_TRUE(o.https);
  EXPECT_EQ(o.cacert, "/ca.pem");
  EXPECT_EQ(o.cert, "/c.pem");
  EXPECT_EQ(o.key, "/k.pem");
  o = parse("a:1,b:2", {{"protocol", "HTTPS"}});
  EXPECT_TRUE(o.https);
  EXPECT_EQ(o.endpoints[1].host, "b");
  EXPECT_TRUE(parse("https://a:1", {{"protocol", "https"}}).https);
}

TEST(EtcdOptions, TimeoutsFromRdzvConf) {
  auto o = parse("a:1", {{"read_timeout", "2.5"}, {"lease_ttl", "2.5"}});
  EXPECT_EQ(o.request_timeout, 2500ms);
  EXPECT_EQ(o.lease_ttl, 3s);  // whole seconds, rounded up: etcd's TTLs are integers
  EXPECT_EQ(parse("a:1", {{"member_ttl", "2.2"}}).member_ttl, 3s);
  EXPECT_EQ(parse("a:1", {{"member_ttl", "0"}}).member_ttl, 0s);  // off: the heartbeat alone
}

TEST(EtcdOptions, RefusesMistakesWithTheFix) {
  expect_refused("", {}, "needs --rdzv-endpoint");
  expect_refused("a:1,,b:2", {}, "empty endpoint");
  expect_refused("a:0", {}, "port 0");
  expect_refused("http://a:1,https://b:2", {}, "mixes http and https");
  expect_refused("https://a:1", {{"protocol", "http"}}, "contradicts");
  expect_refused("a:1", {{"protocol", "grpc"}}, "use http or https");
  expect_refused("a:1", {{"cacert", "/ca.pem"}}, "needs protocol=https");
  expect_refused("a:1", {{"protocol", "https"}, {"cert", "/c.pem"}}, "go together");
  expect_refused("a:1", {{"read_timeout", "0"}}, "read_timeout must be positive");
  expect_refused("a:1", {{"lease_ttl", "1"}}, "at least 2 s");
  expect_refused("a:1", {{"member_ttl", "1"}}, "0 (off) or at least 2 s");
}
