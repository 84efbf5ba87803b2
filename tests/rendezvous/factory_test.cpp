#include "rendezvous/factory.hpp"

#include <gtest/gtest.h>

using namespace ctrun;
using namespace ctrun::rdzv;

TEST(Factory, RejectsUnknownBackendAndBadNodeCounts) {
  RendezvousParameters p;
  p.backend = "etcd";
  EXPECT_THROW(create_handler(p, NodeSpec{}), std::invalid_argument);
  p.backend = "c10d";
  EXPECT_THROW(create_handler(p, NodeSpec{}), std::invalid_argument);  // no endpoint
  p.backend = "etcd-v2";                                               // etcd's v2 API is gone from etcd 3.6
  p.endpoint = "a:1";
  EXPECT_THROW(create_handler(p, NodeSpec{}), std::invalid_argument);
  p.backend = "c10d";
  p.endpoint.clear();
  p.min_nodes = 3;
  p.max_nodes = 2;
  EXPECT_THROW(create_handler(p, NodeSpec{}), std::invalid_argument);
}

TEST(Factory, LocalHostMatching) {
  EXPECT_TRUE(is_local_host("localhost"));
  EXPECT_TRUE(is_local_host("127.0.0.1"));
  EXPECT_TRUE(is_local_host("127.0.0.7"));   // every 127/8 address is this machine (multi-node tests use them)
  EXPECT_FALSE(is_local_host("192.0.2.1"));  // TEST-NET-1: numeric, no lookup, never local
}

TEST(Factory, StandaloneStyleEndpointHostsOnAnEphemeralPort) {
  RendezvousParameters p;
  p.backend = "c10d";
  p.endpoint = "127.0.0.1:0";  // --standalone: localhost:0, this agent hosts
  p.run_id = "standalone";
  auto h = create_handler(p, NodeSpec{"a", 4, "default"});
  h->set_worker_store_address("127.0.0.1", 4242);
  auto info = h->next_rendezvous();
  EXPECT_EQ(info.group_world_size, 1);
  EXPECT_EQ(info.global_world_size, 4);
  EXPECT_EQ(info.master_port, 4242);
  EXPECT_TRUE(h->shutdown());
  EXPECT_TRUE(h->is_closed());
}

TEST(Factory, SameHostComparesAddresses) {
  EXPECT_TRUE(same_host("127.0.0.2", "127.0.0.2"));
  EXPECT_FALSE(same_host("127.0.0.2", "127.0.0.3"));  // one machine, two "nodes" of a multi-node test
  EXPECT_TRUE(same_host("::1", "0:0:0:0:0:0:0:1"));
}
