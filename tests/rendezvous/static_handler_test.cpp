#include "rendezvous/static_handler.hpp"

#include <gtest/gtest.h>

#include <future>

#include "rendezvous/factory.hpp"
#include "store/memory_store.hpp"
#include "store/server.hpp"

using namespace ctrun;
using namespace ctrun::rdzv;
using namespace std::chrono_literals;

TEST(StaticHandler, NodeRanksAreFixedAndSizesMayDiffer) {
  auto s = std::make_shared<store::MemoryStore>(5s);
  std::vector<std::unique_ptr<StaticHandler>> hs;
  const int lws[] = {2, 3, 1};
  for (int r = 0; r < 3; ++r)
    hs.push_back(
        std::make_unique<StaticHandler>(StaticConfig{"job", 3, r, Endpoint{"10.0.0.1", 29500}},
                                        NodeSpec{std::string(1, static_cast<char>('z' - r)), lws[r], "default"}, s));
  std::vector<std::future<RoundInfo>> fs;
  for (auto& h : hs) fs.push_back(std::async(std::launch::async, [&h] { return h->next_rendezvous(); }));
  const int base[] = {0, 2, 5};
  for (int r = 0; r < 3; ++r) {
    auto info = fs[r].get();
    EXPECT_EQ(info.group_rank, r);  // the node rank, not the address order
    EXPECT_EQ(info.base_global_rank, base[r]);
    EXPECT_EQ(info.global_world_size, 6);
    EXPECT_EQ(info.master_addr, "10.0.0.1");
    EXPECT_EQ(info.master_port, 29500);
  }
  EXPECT_EQ(hs[1]->next_rendezvous().base_global_rank, 2);  // restarts reuse the one round
  EXPECT_EQ(hs[1]->num_nodes_waiting(), 0);
}

TEST(StaticHandler, BadNodeRankIsRejected) {
  auto s = std::make_shared<store::MemoryStore>(5s);
  EXPECT_THROW(StaticHandler(StaticConfig{"job", 2, 2, Endpoint{"h", 1}}, NodeSpec{}, s), RendezvousError);
}

TEST(StaticHandler, TwoNodesOverRealStoreHostedByRankZero) {
  store::ServerOptions o;
  o.host = "127.0.0.1";
  store::Server agent_store(o);  // rank 0's agent store, on a port of the kernel's choosing
  agent_store.start();
  const auto port = agent_store.port();
  RendezvousParameters p;
  p.backend = "static";
  p.min_nodes = p.max_nodes = 2;
  p.master_addr = "127.0.0.1";
  p.master_port = port;
  p.run_id = "s";
  p.node_rank = 0;
  HandlerOptions own;
  own.agent_store_port = port;
  auto h0 = create_handler(p, NodeSpec{"a", 1, "default"}, own);
  p.node_rank = 1;
  auto h1 = create_handler(p, NodeSpec{"b", 1, "default"});
  auto f = std::async(std::launch::async, [&] { return h1->next_rendezvous(); });
  auto i0 = h0->next_rendezvous();
  auto i1 = f.get();
  EXPECT_EQ(i0.group_rank, 0);
  EXPECT_EQ(i1.group_rank, 1);
  EXPECT_EQ(i1.master_port, port);
  auto b = std::async(std::launch::async, [&] { return h1->exit_barrier(5s); });
  EXPECT_TRUE(h0->exit_barrier(5s));
  EXPECT_TRUE(b.get());
}

TEST(StaticHandler, RankZeroUsesTheAgentsStoreWhenItAlreadyServesTheMasterPort) {
  store::ServerOptions o;
  o.host = "127.0.0.1";
  store::Server agent_store(o);  // the agent's worker store, already on --master-port
  agent_store.start();
  RendezvousParameters p;
  p.backend = "static";
  p.master_addr = "127.0.0.1";
  p.master_port = agent_store.port();
  p.run_id = "shared";
  HandlerOptions own;
  own.agent_store_port = agent_store.port();
  auto h = create_handler(p, NodeSpec{"a", 2, "default"}, own);
  auto info = h->next_rendezvous();
  EXPECT_EQ(info.global_world_size, 2);
  EXPECT_EQ(info.master_port, agent_store.port());
  EXPECT_TRUE(agent_store.get_local("/ctrun.static.shared/assign/0").has_value());
}

// A port held by anybody else (here a store that is not the agent's) is an error that says what to do, never a
// store to join: rank 0 would write its rendezvous into a foreign server.
TEST(StaticHandler, RankZeroRefusesAForeignServerOnTheMasterPort) {
  store::ServerOptions o;
  o.host = "127.0.0.1";
  store::Server foreign(o);
  foreign.start();
  RendezvousParameters p;
  p.backend = "static";
  p.min_nodes = p.max_nodes = 2;
  p.master_addr = "127.0.0.1";
  p.master_port = foreign.port();
  p.run_id = "foreign";
  try {
    create_handler(p, NodeSpec{"a", 1, "default"});
    ADD_FAILURE() << "rank 0 joined the foreign server";
  } catch (const RendezvousError& e) {
    EXPECT_NE(std::string(e.what()).find("another process holds that port"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("--master-port"), std::string::npos) << e.what();
  }
  EXPECT_TRUE(foreign.keys_local().empty());
}
