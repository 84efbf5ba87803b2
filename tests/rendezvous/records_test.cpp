#include "rendezvous/records.hpp"

#include <gtest/gtest.h>

#include "rendezvous/handler.hpp"

using namespace ctrun::rdzv;

TEST(Records, NaturalOrder) {
  EXPECT_TRUE(natural_less("node2", "node10"));
  EXPECT_FALSE(natural_less("node10", "node2"));
  EXPECT_TRUE(natural_less("127.0.0.2", "127.0.0.10"));
  EXPECT_TRUE(natural_less("a", "b"));
  EXPECT_TRUE(natural_less("node", "node1"));
  EXPECT_FALSE(natural_less("node1", "node1"));
  EXPECT_TRUE(natural_less("n1", "n01"));  // equal numbers: fewer leading zeros first, still a strict order
  EXPECT_FALSE(natural_less("n01", "n1"));
  EXPECT_TRUE(natural_less("x99999999999999999999998", "x99999999999999999999999"));  // no overflow
}

TEST(Records, NodeRecordRoundTripAndMalformed) {
  NodeRecord r{"node\"7", 42, 3, "trainer", "10.0.0.1", 1234, 5};
  auto d = NodeRecord::decode(r.encode());
  EXPECT_EQ(d.addr, r.addr);
  EXPECT_EQ(d.pid, 42);
  EXPECT_EQ(d.local_world_size, 3);
  EXPECT_EQ(d.role, "trainer");
  EXPECT_EQ(d.store_port, 1234);
  EXPECT_EQ(d.arrival, 5);
  EXPECT_THROW(NodeRecord::decode("{not json"), RendezvousError);
  EXPECT_THROW(Assignment::decode("[1,2]"), RendezvousError);
}

TEST(Records, HeterogeneousSizesAndRoles) {
  // Arrival order differs from the natural order on purpose.
  std::vector<NodeRecord> nodes = {
      {"node10", 1, 4, "a", "h10", 10, 1}, {"node2", 1, 2, "b", "h2", 20, 2}, {"node1", 1, 3, "a", "h1", 30, 3}};
  std::vector<int> order;
  auto a = assign_ranks(nodes, &order);
  EXPECT_EQ(order, (std::vector<int>{2, 1, 0}));
  // node1 (3 workers, role a), node2 (2, b), node10 (4, a).
  EXPECT_EQ(a[2].group_rank, 0);
  EXPECT_EQ(a[1].group_rank, 1);
  EXPECT_EQ(a[0].group_rank, 2);
  EXPECT_EQ(a[2].base_global_rank, 0);
  EXPECT_EQ(a[1].base_global_rank, 3);
  EXPECT_EQ(a[0].base_global_rank, 5);
  for (const auto& x : a) {
    EXPECT_EQ(x.global_world_size, 9);
    EXPECT_EQ(x.group_world_size, 3);
    EXPECT_EQ(x.master_addr, "h1");  // group rank 0's worker store
    EXPECT_EQ(x.master_port, 30);
  }
  EXPECT_EQ(a[2].base_role_rank, 0);  // role a: node1 then node10
  EXPECT_EQ(a[0].base_role_rank, 3);
  EXPECT_EQ(a[0].role_world_size, 7);
  EXPECT_EQ(a[1].base_role_rank, 0);  // role b alone
  EXPECT_EQ(a[1].role_world_size, 2);
}

TEST(Records, SameHostTiesBreakByPidThenArrival) {
  std::vector<NodeRecord> nodes = {{"h", 9, 1, "r", "", 0, 1}, {"h", 3, 1, "r", "", 0, 2}, {"h", 3, 1, "r", "", 0, 0}};
  auto a = assign_ranks(nodes);
  EXPECT_EQ(a[2].group_rank, 0);
  EXPECT_EQ(a[1].group_rank, 1);
  EXPECT_EQ(a[0].group_rank, 2);
  EXPECT_EQ(a[0].master_addr, "h");  // no worker store host: fall back to the node address
}
