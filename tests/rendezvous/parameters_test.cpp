#include "rendezvous/parameters.hpp"

#include <gtest/gtest.h>

using namespace ctrun::rdzv;
using namespace std::chrono_literals;

TEST(Parameters, NnodesSingleAndRange) {
  EXPECT_EQ(parse_nnodes("4"), std::make_pair(4, 4));
  EXPECT_EQ(parse_nnodes("2:8"), std::make_pair(2, 8));
  EXPECT_THROW(parse_nnodes("0"), std::invalid_argument);
  EXPECT_THROW(parse_nnodes("3:2"), std::invalid_argument);
  EXPECT_THROW(parse_nnodes("1:2:3"), std::invalid_argument);
  EXPECT_THROW(parse_nnodes("a:2"), std::invalid_argument);
}

TEST(Parameters, EndpointForms) {
  auto e = parse_endpoint("node0", kDefaultC10dPort);
  EXPECT_EQ(e.host, "node0");
  EXPECT_EQ(e.port, 29400);
  e = parse_endpoint("127.0.0.2:1234", kDefaultC10dPort);
  EXPECT_EQ(e.host, "127.0.0.2");
  EXPECT_EQ(e.port, 1234);
  e = parse_endpoint("[::1]:555", kDefaultC10dPort);
  EXPECT_EQ(e.host, "::1");
  EXPECT_EQ(e.port, 555);
  EXPECT_EQ(e.to_string(), "[::1]:555");
  e = parse_endpoint("[fe80::1]", kDefaultC10dPort);
  EXPECT_EQ(e.port, 29400);
  EXPECT_EQ(parse_endpoint("::1", 7).host, "::1");
  EXPECT_THROW(parse_endpoint("host:99999", 1), std::invalid_argument);
  EXPECT_THROW(parse_endpoint("host:x", 1), std::invalid_argument);
  EXPECT_THROW(parse_endpoint("[::1", 1), std::invalid_argument);
  EXPECT_THROW(parse_endpoint(":80", 1), std::invalid_argument);
}

TEST(Parameters, RdzvConfTorchrunRules) {
  auto c = parse_rdzv_conf("join_timeout=60,last_call_timeout=0.5, is_host = 1,x=a=b");
  EXPECT_EQ(c.at("join_timeout"), "60");
  EXPECT_EQ(c.at("is_host"), "1");
  EXPECT_EQ(c.at("x"), "a=b");  // split on the first '=' only
  EXPECT_TRUE(parse_rdzv_conf("").empty());
  EXPECT_THROW(parse_rdzv_conf("a"), std::invalid_argument);
  EXPECT_THROW(parse_rdzv_conf("=1"), std::invalid_argument);
  EXPECT_THROW(parse_rdzv_conf("a="), std::invalid_argument);
}

TEST(Parameters, C10dSettingsDefaultsAndOverrides) {
  RendezvousParameters p;
  auto s = c10d_settings(p);
  EXPECT_EQ(s.join_timeout, 600s);
  EXPECT_EQ(s.last_call_timeout, 30s);
  EXPECT_EQ(s.keep_alive_interval, 5s);
  EXPECT_EQ(s.keep_alive_max_attempt, 3);
  EXPECT_EQ(s.read_timeout, 60s);
  EXPECT_FALSE(s.is_host.has_value());
  p.config = parse_rdzv_conf("join_timeout=2.5,keep_alive_interval=1,keep_alive_max_attempt=2,is_host=false");
  s = c10d_settings(p);
  EXPECT_EQ(s.join_timeout, 2500ms);
  EXPECT_EQ(s.keep_alive_max_attempt, 2);
  EXPECT_EQ(s.is_host, false);
  p.config = parse_rdzv_conf("is_host=maybe");
  EXPECT_THROW(c10d_settings(p), std::invalid_argument);
  p.config = parse_rdzv_conf("join_timeout=-1");
  EXPECT_THROW(c10d_settings(p), std::invalid_argument);
  p.config = parse_rdzv_conf("keep_alive_max_attempt=0");
  EXPECT_THROW(c10d_settings(p), std::invalid_argument);
}

TEST(Parameters, BackendNames) {
  EXPECT_EQ(parse_backend("static"), Backend::kStatic);
  EXPECT_EQ(parse_backend("c10d"), Backend::kC10d);
  EXPECT_EQ(parse_backend("etcd"), Backend::kEtcd);
  EXPECT_EQ(parse_backend("etcd-v3"), Backend::kEtcd);
  EXPECT_FALSE(parse_backend("etcd-v2"));
  EXPECT_FALSE(parse_backend("Static"));
}
