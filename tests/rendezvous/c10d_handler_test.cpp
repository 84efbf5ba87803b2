// The c10d handler as the agent uses it: handlers in threads (real clock, short timeouts) over one MemoryStore,
// and over a real TCPStore server (one handler hosting it, as on a real cluster).
#include "rendezvous/c10d_handler.hpp"

#include <gtest/gtest.h>

#include <future>
#include <set>
#include <thread>

#include "rendezvous/factory.hpp"
#include "store/client_loop.hpp"
#include "store/counting_store.hpp"
#include "store/memory_store.hpp"
#include "store/mux_store.hpp"
#include "store/server.hpp"
#include "tests/support/wait.hpp"

using namespace ctrun;
using namespace ctrun::rdzv;
using namespace std::chrono_literals;
using ctrun::test::eventually;

namespace {

C10dConfig config(int min, int max, const std::string& id = "job") {
  C10dConfig c;
  c.run_id = id;
  c.min_nodes = min;
  c.max_nodes = max;
  c.settings.join_timeout = 10s;
  c.settings.last_call_timeout = 100ms;
  // Long enough that a loaded CI machine never misses one; tests of death detection shorten it.
  c.settings.keep_alive_interval = 1s;
  c.settings.keep_alive_max_attempt = 3;
  c.wait_slice = 1s;
  return c;
}

std::unique_ptr<C10dHandler> make(const std::shared_ptr<store::Store>& s, const C10dConfig& c, const std::string& addr,
                                  int lws = 1) {
  auto h = std::make_unique<C10dHandler>(c, NodeSpec{addr, lws, "default"}, [s] { return s; });
  h->set_worker_store_address(addr, 6000);
  return h;
}

std::vector<RoundInfo> rendezvous_all(std::vector<std::unique_ptr<C10dHandler>>& hs, const std::vector<int>& which) {
  std::vector<std::future<RoundInfo>> fs;
  for (int i : which) fs.push_back(std::async(std::launch::async, [&hs, i] { return hs[i]->next_rendezvous(); }));
  std::vector<RoundInfo> out;
  for (auto& f : fs) out.push_back(f.get());
  return out;
}

}  // namespace

TEST(C10dHandler, ConcurrentJoinsInThreadsGetOneConsistentRound) {
  auto s = std::make_shared<store::MemoryStore>(5s);
  const int n = 24;
  std::vector<std::unique_ptr<C10dHandler>> hs;
  std::vector<int> all;
  for (int i = 0; i < n; ++i) {
    hs.push_back(make(s, config(n, n), "node" + std::to_string(i), 1 + i % 3));
    all.push_back(i);
  }
  auto infos = rendezvous_all(hs, all);
  std::set<int> ranks;
  int world = 0;
  for (int i = 0; i < n; ++i) world += 1 + i % 3;
  for (const auto& info : infos) {
    ranks.insert(info.group_rank);
    EXPECT_EQ(info.group_world_size, n);
    EXPECT_EQ(info.global_world_size, world);
    EXPECT_EQ(info.master_addr, "node0");  // natural order: node0 is group rank 0 and hosts the worker store
    EXPECT_EQ(info.master_port, 6000);
  }
  EXPECT_EQ(static_cast<int>(ranks.size()), n);
  for (auto& h : hs) h->shutdown();
}

TEST(C10dHandler, KilledAgentBreaksTheRoundAndSurvivorsRegroup) {
  auto s = std::make_shared<store::MemoryStore>(5s);
  auto c = config(2, 3);
  c.settings.keep_alive_interval = 200ms;  // dead after 0.5 s of silence
  std::vector<std::unique_ptr<C10dHandler>> hs;
  for (auto a : {"a", "b", "c"}) hs.push_back(make(s, c, a));
  rendezvous_all(hs, {0, 1, 2});
  EXPECT_FALSE(hs[0]->round_broken());
  hs[2].reset();  // like SIGKILL: heartbeats stop, nothing is written
  ASSERT_TRUE(eventually([&] { return hs[0]->round_broken() && hs[1]->round_broken(); }));
  EXPECT_NE(hs[0]->restart_reason().find("node c"), std::string::npos) << hs[0]->restart_reason();
  EXPECT_EQ(hs[0]->num_nodes_waiting(), 0);  // a death is not a waiting node
  auto infos = rendezvous_all(hs, {0, 1});
  EXPECT_EQ(infos[0].round, 1u);
  EXPECT_EQ(infos[0].group_world_size, 2);
  EXPECT_FALSE(hs[0]->round_broken());
}

TEST(C10dHandler, NewNodeMakesMembersSeeWaitingNode) {
  auto s = std::make_shared<store::MemoryStore>(5s);
  std::vector<std::unique_ptr<C10dHandler>> hs;
  for (auto a : {"a", "b", "c"}) hs.push_back(make(s, config(2, 3), a));
  rendezvous_all(hs, {0, 1});
  EXPECT_EQ(hs[0]->num_nodes_waiting(), 0);
  auto late = std::async(std::launch::async, [&] { return hs[2]->next_rendezvous(); });
  ASSERT_TRUE(eventually([&] { return hs[0]->num_nodes_waiting() > 0 && hs[1]->num_nodes_waiting() > 0; }));
  EXPECT_FALSE(hs[0]->round_broken()) << hs[0]->restart_reason();
  auto infos = rendezvous_all(hs, {0, 1});
  auto info_c = late.get();
  EXPECT_EQ(info_c.round, 1u);
  EXPECT_EQ(info_c.group_world_size, 3);
  EXPECT_EQ(infos[0].group_world_size, 3);
}

TEST(C10dHandler, LeaveOnSignalBreaksTheRoundAtOnce) {
  auto s = std::make_shared<store::MemoryStore>(5s);
  auto c = config(2, 2);
  c.settings.keep_alive_interval = 10s;  // heartbeats would take 30 s: the leave must not need them
  std::vector<std::unique_ptr<C10dHandler>> hs;
  for (auto a : {"a", "b"}) hs.push_back(make(s, c, a));
  rendezvous_all(hs, {0, 1});
  hs[1]->leave();
  EXPECT_TRUE(hs[0]->round_broken());
  EXPECT_NE(hs[0]->restart_reason().find("left"), std::string::npos);
  EXPECT_FALSE(hs[0]->is_closed());  // a signal does not close the run
}

// The first failure of a round is claimed once; whether the round can go on without the claimer counts MIN and the
// spares waiting behind a full round.
TEST(C10dHandler, FirstFailureIsClaimedOnceAndSparesLetTheRoundGoOn) {
  auto s = std::make_shared<store::MemoryStore>(5s);
  std::vector<std::unique_ptr<C10dHandler>> hs;
  for (auto a : {"a", "b", "c"}) hs.push_back(make(s, config(2, 2), a));
  rendezvous_all(hs, {0, 1});
  const FailureClaim first = hs[1]->claim_failure();
  EXPECT_TRUE(first.first);
  EXPECT_FALSE(first.others_go_on);  // MIN 2 of 2 and no spare: the job needs this node
  const FailureClaim second = hs[0]->claim_failure();
  EXPECT_FALSE(second.first);
  EXPECT_NE(second.first_node.find("node b"), std::string::npos) << second.first_node;
  // c arrives behind the full round: a spare, which lets a member step out.
  auto spare = std::async(std::launch::async, [&] { return hs[2]->next_rendezvous(); });
  ASSERT_TRUE(eventually([&] { return hs[1]->claim_failure().others_go_on; }));
  hs[1]->step_out("node b stepped out: test");
  EXPECT_TRUE(hs[0]->round_broken());
  EXPECT_NE(hs[0]->restart_reason().find("stepped_out: node b stepped out"), std::string::npos)
      << hs[0]->restart_reason();
  EXPECT_EQ(hs[0]->num_nodes_waiting(), 0);  // a step-out breaks the round; it is not a node waiting
  // The survivor and the spare form the next round without b; b, back later, waits behind it as a spare.
  auto survivor = hs[0]->next_rendezvous();
  auto taken = spare.get();
  EXPECT_EQ(survivor.group_world_size, 2);
  EXPECT_EQ(taken.round, survivor.round);
  auto back = std::async(std::launch::async, [&] { return hs[1]->next_rendezvous(); });
  EXPECT_EQ(back.wait_for(300ms), std::future_status::timeout);                  // the round is full and healthy
  ASSERT_TRUE(eventually([&] { return hs[0]->claim_failure().others_go_on; }));  // b counts as a spare now
  hs[0]->leave();  // the round ends: b takes a's place beside c
  auto c_next = std::async(std::launch::async, [&] { return hs[2]->next_rendezvous(); });
  auto after = back.get();
  EXPECT_EQ(after.group_world_size, 2);
  EXPECT_GT(after.round, survivor.round);
  EXPECT_EQ(c_next.get().round, after.round);
}

TEST(C10dHandler, ExitBarrierThenShutdownClosesTheRunId) {
  auto s = std::make_shared<store::MemoryStore>(5s);
  std::vector<std::unique_ptr<C10dHandler>> hs;
  for (auto a : {"a", "b"}) hs.push_back(make(s, config(2, 2, "once"), a));
  rendezvous_all(hs, {0, 1});
  EXPECT_FALSE(hs[0]->exit_barrier(50ms));  // b has not finished yet
  auto b = std::async(std::launch::async, [&] { return hs[1]->exit_barrier(5s); });
  EXPECT_TRUE(b.get());
  EXPECT_TRUE(hs[0]->shutdown());
  EXPECT_TRUE(hs[1]->is_closed());
  auto again = make(s, config(1, 1, "once"), "a");
  try {
    again->next_rendezvous();
    FAIL() << "a closed run id must not rendezvous again";
  } catch (const RendezvousClosedError& e) {
    EXPECT_NE(std::string(e.what()).find("once"), std::string::npos) << e.what();
  }
}

TEST(C10dHandler, JoinTimeoutBelowMin) {
  auto s = std::make_shared<store::MemoryStore>(5s);
  auto c = config(2, 2);
  c.settings.join_timeout = 300ms;
  auto h = make(s, c, "lonely");
  auto start = std::chrono::steady_clock::now();
  EXPECT_THROW(h->next_rendezvous(), RendezvousTimeoutError);
  EXPECT_LT(std::chrono::steady_clock::now() - start, 3s);
}

TEST(C10dHandler, WorkerStoreAddressIsRequired) {
  auto s = std::make_shared<store::MemoryStore>(5s);
  C10dHandler h(config(1, 1), NodeSpec{"a", 1, "default"}, [s] { return s; });
  EXPECT_THROW(h.next_rendezvous(), RendezvousError);
}

TEST(C10dHandler, OverRealTcpStoreHostedByTheFirstAgent) {
  // The first agent hosts on a port the OS picks; the others are given that port, find it taken when they try to
  // host it on 127.0.0.1 too, and become its clients (never a port found free and released: under load another
  // process can take it in between).
  RendezvousParameters p;
  p.backend = "c10d";
  p.endpoint = "127.0.0.1:0";
  p.run_id = "tcp";
  p.min_nodes = p.max_nodes = 3;
  p.config = parse_rdzv_conf("last_call_timeout=0.1,keep_alive_interval=0.2,read_timeout=5");
  std::vector<std::unique_ptr<Handler>> hs;
  for (int i = 0; i < 3; ++i) {
    hs.push_back(create_handler(p, NodeSpec{"127.0.0." + std::to_string(i + 2), 2, "default"}));
    hs.back()->set_worker_store_address("127.0.0." + std::to_string(i + 2), 5000 + i);
    p.endpoint = hs.front()->served_store();
  }
  EXPECT_TRUE(hs[1]->served_store().empty() && hs[2]->served_store().empty()) << "one host, two clients";
  std::vector<std::future<RoundInfo>> fs;
  for (auto& h : hs) fs.push_back(std::async(std::launch::async, [&h] { return h->next_rendezvous(); }));
  std::set<int> ranks;
  for (auto& f : fs) {
    auto info = f.get();
    ranks.insert(info.group_rank);
    EXPECT_EQ(info.global_world_size, 6);
    EXPECT_EQ(info.base_global_rank, 2 * info.group_rank);
    EXPECT_EQ(info.master_addr, "127.0.0.2");
    EXPECT_EQ(info.master_port, 5000);
  }
  EXPECT_EQ(ranks.size(), 3u);
  // A non-hosting agent dies: the others notice through the real store.
  hs[2].reset();
  EXPECT_TRUE(eventually([&] { return hs[1]->round_broken(); }));
  for (int i = 1; i >= 0; --i) hs[i]->shutdown();
}

TEST(C10dHandler, StoreBytesPerRoundGrowLinearlyInTheNumberOfAgents) {
  auto per_agent = [](int n) {
    auto s = std::make_shared<store::MemoryStore>(5s);
    auto traffic = std::make_shared<store::StoreTraffic>();
    auto counted = std::make_shared<store::CountingStore>(s, traffic);
    std::vector<std::unique_ptr<C10dHandler>> hs;
    std::vector<int> all;
    for (int i = 0; i < n; ++i) {
      int calls = 0;  // count the join/poll connection, not the heartbeat one
      auto h = std::make_unique<C10dHandler>(config(n, n), NodeSpec{"node" + std::to_string(i), 1, "default"},
                                             [&]() -> std::shared_ptr<store::Store> {
                                               if (calls++ == 0) return counted;
                                               return s;
                                             });
      h->set_worker_store_address("h", 1);
      hs.push_back(std::move(h));
      all.push_back(i);
    }
    rendezvous_all(hs, all);
    for (auto& h : hs) h->shutdown();
    return static_cast<double>(traffic->bytes) / n;
  };
  const double small = per_agent(8), large = per_agent(96);
  EXPECT_GT(small, 0);
  // O(N) in total = O(1) per agent; torchrun's blob makes this grow with N (O(N^2) in total).
  EXPECT_LT(large, 1.5 * small) << "bytes per agent: " << small << " at 8 agents, " << large << " at 96";
}

// What a round costs the store server, per agent, on the wire: constant in N. Each agent holds one connection (a
// MuxStore) for everything: the join, its first heartbeat and ON_CLOSE registration, and its watches of the round.
TEST(C10dHandler, WireRequestsPerAgentDoNotGrowWithTheNumberOfAgents) {
  store::ServerOptions o;
  o.host = "127.0.0.1";
  store::Server server(o);
  server.start();
  auto loop = std::make_shared<store::ClientLoop>();
  auto requests = [&] {
    std::uint64_t n = 0;
    for (const auto& [name, count] : server.stats().ops) n += count;
    return n;
  };
  auto per_agent = [&](int n) {
    auto c = config(n, n, "wire" + std::to_string(n));
    c.settings.keep_alive_interval = 60s;
    std::vector<std::unique_ptr<C10dHandler>> hs;
    std::vector<int> all;
    for (int i = 0; i < n; ++i) {
      hs.push_back(std::make_unique<C10dHandler>(c, NodeSpec{"node" + std::to_string(i), 1, "default"},
                                                 [&]() -> std::shared_ptr<store::Store> {
                                                   store::MuxStore::Options t;
                                                   t.host = "127.0.0.1";
                                                   t.port = server.port();
                                                   t.timeout = 10s;
                                                   return std::make_shared<store::MuxStore>(t, loop);
                                                 }));
      hs.back()->set_worker_store_address("h", 1);
      all.push_back(i);
    }
    EXPECT_EQ(server.stats().connections_open, static_cast<std::uint64_t>(n));  // one connection per agent
    const auto before = requests();  // after the connections' VALIDATE + PING + MULTIPLEX
    auto rounds = rendezvous_all(hs, all);
    std::this_thread::sleep_for(300ms);  // each member's first heartbeat and its watches
    const auto used = requests() - before;
    std::set<int> ranks;
    for (const auto& r : rounds) ranks.insert(r.group_rank);
    EXPECT_EQ(static_cast<int>(ranks.size()), n);
    EXPECT_EQ(server.stats().connections_open, static_cast<std::uint64_t>(n));
    for (auto& h : hs) h->shutdown();
    return static_cast<double>(used) / n;
  };
  const double small = per_agent(8), large = per_agent(64);
  // About 13 per agent (docs/rendezvous.md: 9 for the join, then a beat, the ON_CLOSE registration and the two
  // watches); the old protocol (everyone woken at MIN, then at done; reads as CHECK + WAIT + GET) used 14-20 for
  // the join alone, more as N grew.
  EXPECT_LE(large, 14.0) << small << " requests per agent at 8 agents, " << large << " at 64";
  EXPECT_LE(large, small + 1.0) << small << " requests per agent at 8 agents, " << large << " at 64";
}

// Issue 24 item 4: the job ended (both passed the exit barrier), and the node hosting the rendezvous store is gone
// before the other one closes the run (its process ended: the store with it). The other's shutdown and teardown
// must not wait read_timeout per store call (reconnecting to a port nobody listens on), and in particular not on a
// heartbeat caught reconnecting.
TEST(C10dHandler, ShutdownAfterTheHostIsGoneIsPrompt) {
  RendezvousParameters p;
  p.backend = "c10d";
  p.endpoint = "127.0.0.1:0";  // the host binds port 0; the other node is given the port it got
  p.run_id = "hostgone";
  p.min_nodes = p.max_nodes = 2;
  std::vector<std::unique_ptr<Handler>> hs;
  for (const char* conf : {"is_host=1,last_call_timeout=0.1,keep_alive_interval=0.2,read_timeout=20",
                           "is_host=0,last_call_timeout=0.1,keep_alive_interval=0.2,read_timeout=20"}) {
    p.config = parse_rdzv_conf(conf);
    hs.push_back(create_handler(p, NodeSpec{"127.0.0." + std::to_string(hs.size() + 2), 1, "default"}));
    hs.back()->set_worker_store_address("127.0.0.1", 5000);
    p.endpoint = hs.front()->served_store();
  }
  std::vector<std::future<RoundInfo>> fs;
  for (auto& h : hs) fs.push_back(std::async(std::launch::async, [&h] { return h->next_rendezvous(); }));
  for (auto& f : fs) f.get();
  std::vector<std::future<bool>> barrier;
  for (auto& h : hs) barrier.push_back(std::async(std::launch::async, [&h] { return h->exit_barrier(10s); }));
  for (auto& b : barrier) ASSERT_TRUE(b.get());
  hs[0].reset();                        // the host's process ended: its store with it
  std::this_thread::sleep_for(1500ms);  // the other's heartbeats have found it gone and are reconnecting
  const auto start = std::chrono::steady_clock::now();
  hs[1]->shutdown();
  hs[1].reset();
  EXPECT_LT(std::chrono::steady_clock::now() - start, 3s);
}
