// Interop with real PyTorch 1.13 (Debian python3-torch), every server and worker a real child process:
//  (a) torch's TCPStore client against our ctstore: every Python-visible op;
//  (b) our TcpStore client (legacy dialect) against torch's own TCPStore server;
//  (c) 4 torch gloo workers in torchelastic agent-store mode using ctstore as their store.
// Skips (with the reason) when python3 cannot import torch. Every child is killed and reaped by its owner.

#include <gtest/gtest.h>

#include <chrono>
#include <regex>
#include <set>

#include "store/prefix_store.hpp"
#include "store/tcp_store.hpp"
#include "tests/store/store_checks.hpp"
#include "tests/store/torch_env.hpp"

namespace ctrun::test {
namespace {

using store::TcpStore;
using store::TcpStoreOptions;
using store::protocol::Dialect;

std::unique_ptr<TcpStore> connect(std::uint16_t port, Dialect dialect, bool add_init_key = false) {
  TcpStoreOptions o;
  o.port = port;
  o.dialect = dialect;
  o.timeout = std::chrono::seconds(20);
  o.connect_timeout = std::chrono::seconds(10);
  o.add_init_key = add_init_key;
  return std::make_unique<TcpStore>(o);
}

// ---- (b) our client, legacy dialect, against torch 1.13's own server ----
// One test (one python start, about a second) running every check in turn; SCOPED_TRACE names the failing one.
// Issue 16: with no dialect given (comm's workers under torch 1.13's torchrun), the client finds out that
// torch 1.13's server speaks the legacy dialect by itself, in seconds (it used to give up after 60 s).
TEST(OurClientVsTorchServer, DetectsTheLegacyDialectByItself) {
  CTRUN_REQUIRE_TORCH();
  auto server = start_torch_server();
  TcpStoreOptions o;
  o.port = server.port;
  o.timeout = std::chrono::seconds(20);
  o.connect_timeout = std::chrono::seconds(20);
  auto t0 = std::chrono::steady_clock::now();
  TcpStore s(o);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(10));
  EXPECT_EQ(s.dialect(), Dialect::kLegacy);
  s.set("auto", "detected");
  EXPECT_EQ(s.get("auto"), "detected");
  EXPECT_EQ(s.add("n", 2), 2);
  // No ctrun extension on a torch server: nothing is sent, the caller falls back to heartbeats.
  EXPECT_FALSE(s.append_on_close("lost", "-0,", "+0,"));
  EXPECT_EQ(s.get("auto"), "detected");
  // The server survived the probe and serves a second client (which detects again).
  TcpStore again(o);
  EXPECT_EQ(again.get("auto"), "detected");
}

TEST(OurClientVsTorchServer, EveryOpInTheLegacyDialect) {
  CTRUN_REQUIRE_TORCH();
  auto server = start_torch_server();
  const auto port = server.port;
  StoreFactory factory = [port] { return std::unique_ptr<store::Store>(connect(port, Dialect::kLegacy)); };
  {
    SCOPED_TRACE("set/get, NUL bytes, 1 MiB");
    check_set_get(*factory());
  }
  {
    SCOPED_TRACE("add");
    check_add(*factory());
  }
  {
    SCOPED_TRACE("compare_set");
    check_compare_set(*factory());
  }
  {
    SCOPED_TRACE("check/delete/num_keys");
    check_check_delete_num_keys(*factory());
  }
  {
    SCOPED_TRACE("multi_get/multi_set/append, emulated");
    check_multi_and_append(*factory());
  }
  {
    SCOPED_TRACE("deferred multi-key wait");
    check_deferred_wait(*factory(), factory);
  }
  {
    SCOPED_TRACE("wait timeout, transparent reconnect");
    check_wait_timeout(*factory(), factory);
  }
  {
    SCOPED_TRACE("barrier, emulated with ADD");
    check_barrier(factory, 3);
  }
  {
    SCOPED_TRACE("one client shared by threads");
    check_thread_safety(*factory());
  }
  {
    SCOPED_TRACE("init/ unprefixed, user keys with '/'");
    auto a = connect(port, Dialect::kLegacy, /*add_init_key=*/true);
    auto b = connect(port, Dialect::kLegacy, /*add_init_key=*/true);
    TcpStoreOptions raw;
    raw.port = port;
    raw.dialect = Dialect::kLegacy;
    raw.key_prefix = "";
    TcpStore r(raw);
    EXPECT_EQ(r.add("init/", 0), 2);
    a->set("slash", "x");
    EXPECT_EQ(r.get("/slash"), "x");
  }
  {
    SCOPED_TRACE("v2-only ops say the legacy dialect lacks them");
    auto s = connect(port, Dialect::kLegacy);
    for (auto op : std::vector<std::function<void()>>{[&] { s->list_keys(); }, [&] { s->queue_len("q"); },
                                                      [&] { s->queue_push("q", "v"); }, [&] { s->ping(); }}) {
      try {
        op();
        ADD_FAILURE() << "a v2-only op succeeded on the legacy dialect";
      } catch (const store::StoreError& e) {
        EXPECT_NE(std::string(e.what()).find("legacy"), std::string::npos) << e.what();
      }
    }
    EXPECT_EQ(s->add("still_ok", 1), 1);
  }
  {
    SCOPED_TRACE("PrefixStore over torch's server");
    auto base = std::shared_ptr<store::Store>(connect(port, Dialect::kLegacy));
    store::PrefixStore p("/worker/attempt_0", base);
    p.set("rank_1", "vm");
    EXPECT_EQ(base->get("/worker/attempt_0/rank_1"), "vm");
    EXPECT_EQ(p.add("cnt", 3), 3);
  }
}

// ---- (a) torch's client against ctstore, and (c) gloo workers against ctstore ----
class TorchVsCtstore : public ::testing::Test {
 protected:
  void SetUp() override {
    CTRUN_REQUIRE_TORCH();
    server_ = start_ctstore();
  }
  ServedProcess server_;
};

TEST_F(TorchVsCtstore, EveryPythonVisibleOp) {
  ChildProcess py({kTorchPython, kTorchScripts + "torch_client_ops.py", "127.0.0.1", std::to_string(server_.port)});
  auto rc = py.wait_exit(std::chrono::seconds(90));
  ASSERT_TRUE(rc.has_value()) << "torch client hung:\n" << py.output();
  EXPECT_EQ(*rc, 0) << py.output();
  EXPECT_NE(py.output().find("ALL OK"), std::string::npos) << py.output();

  // Cross-check what torch left behind with our own client (v2, against the same server).
  auto s = connect(server_.port, Dialect::kV2);
  EXPECT_EQ(s->get(std::string("nul\0key", 7)), std::string("v\0al\0", 5));
  EXPECT_EQ(s->get("big"), big_value());
  EXPECT_EQ(s->get("cnt"), "3");
  EXPECT_FALSE(s->check({"nokey"}));
  // torch's three clients each sent ADD "init/" 1 (world_size=1) only for the first: s had world_size 1,
  // "other" and "s2" had none.
  TcpStoreOptions raw;
  raw.port = server_.port;
  raw.key_prefix = "";
  EXPECT_EQ(TcpStore(raw).get("init/"), "1");
}

TEST_F(TorchVsCtstore, KilledServerGivesStoreErrorNotHang) {
  TcpStoreOptions o;
  o.port = server_.port;
  o.connect_timeout = std::chrono::milliseconds(300);
  TcpStore s(o);
  s.set("k", "v");
  server_.process->kill();
  auto t0 = std::chrono::steady_clock::now();
  EXPECT_THROW(s.add("k2", 1), store::StoreError);
  // The next call tries to reconnect and fails after connect_timeout, naming the endpoint.
  try {
    s.num_keys();
    ADD_FAILURE() << "num_keys succeeded against a killed server";
  } catch (const store::StoreError& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find("127.0.0.1:" + std::to_string(server_.port)), std::string::npos) << msg;
    EXPECT_NE(msg.find("300 ms"), std::string::npos) << msg;
  }
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(5));
}

TEST_F(TorchVsCtstore, FourGlooWorkersInAgentStoreMode) {
  constexpr int kWorld = 4;
  std::vector<std::unique_ptr<ChildProcess>> workers;
  for (int r = 0; r < kWorld; ++r) {
    workers.push_back(
        std::make_unique<ChildProcess>(std::vector<std::string>{kTorchPython, kTorchScripts + "gloo_worker.py"},
                                       std::map<std::string, std::string>{{"TORCHELASTIC_USE_AGENT_STORE", "True"},
                                                                          {"TORCHELASTIC_RESTART_COUNT", "0"},
                                                                          {"MASTER_ADDR", "127.0.0.1"},
                                                                          {"MASTER_PORT", std::to_string(server_.port)},
                                                                          {"RANK", std::to_string(r)},
                                                                          {"LOCAL_RANK", std::to_string(r)},
                                                                          {"WORLD_SIZE", std::to_string(kWorld)},
                                                                          {"GLOO_SOCKET_IFNAME", "lo"},
                                                                          {"OMP_NUM_THREADS", "1"}}));
  }
  const std::regex result(R"(RESULT rank=(\d+) world=(\S+) sub=(\S+))");
  std::set<int> ranks_seen;
  for (int r = 0; r < kWorld; ++r) {
    auto rc = workers[r]->wait_exit(std::chrono::seconds(120));
    ASSERT_TRUE(rc.has_value()) << "worker " << r << " hung:\n" << workers[r]->output();
    EXPECT_EQ(*rc, 0) << "worker " << r << ":\n" << workers[r]->output();
    std::smatch m;
    auto out = workers[r]->output();
    ASSERT_TRUE(std::regex_search(out, m, result)) << out;
    EXPECT_EQ(std::stoi(m[1]), r);
    EXPECT_EQ(m[2].str(), "10");  // 1+2+3+4
    EXPECT_EQ(m[3].str(), r % 2 == 0 ? "40" : "-1") << "sub-group {0,2}: 10*1 + 10*3";
    ranks_seen.insert(std::stoi(m[1]));
  }
  EXPECT_EQ(ranks_seen.size(), static_cast<std::size_t>(kWorld));

  // The workers used the 1.13 agent-store layout on our server: the attempt-prefixed store-based barrier of
  // the default group counted all 4 ranks, and every worker counted itself on "init/".
  TcpStoreOptions raw;
  raw.port = server_.port;
  raw.key_prefix = "";
  TcpStore s(raw);
  EXPECT_EQ(s.get("init/"), std::to_string(kWorld));
  EXPECT_EQ(s.get("//worker/attempt_0/default_pg/store_based_barrier_key:1"), std::to_string(kWorld));
}

}  // namespace
}  // namespace ctrun::test
