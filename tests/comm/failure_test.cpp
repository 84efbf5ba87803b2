// Misuse and failure: invalid arguments raise at once on the caller; ranks that call different ops or sizes
// get a PeerError naming the mismatch; a stalled rank makes the others fail within the group timeout.
#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <thread>

#include "comm/init/init_method.hpp"
#include "common/worker_env.hpp"
#include "harness.hpp"
#include "store/relay.hpp"
#include "store/server.hpp"
#include "store/tcp_store.hpp"

namespace ctrun::comm::testing {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;
using Clock = std::chrono::steady_clock;

ProcessGroupOptions quick(const std::string& transport, const std::string& algorithm = "") {
  ProcessGroupOptions o;
  o.transport = transport;
  o.algorithm = algorithm;
  o.timeout = seconds(2);
  return o;
}

class PerTransport : public ::testing::TestWithParam<std::string> {};

TEST_P(PerTransport, InvalidArgumentsThrowOnTheCaller) {
  run_ranks(2, quick(GetParam()), [](int rank, ProcessGroup& pg) {
    std::vector<float> f(4);
    std::vector<std::int32_t> i(4);
    EXPECT_THROW(pg.all_reduce(f, ReduceOp::kBxor), InvalidArgumentError);
    EXPECT_THROW(pg.broadcast(f, 2), InvalidArgumentError);
    EXPECT_THROW(pg.broadcast(f, -1), InvalidArgumentError);
    EXPECT_THROW(pg.send(f, rank), InvalidArgumentError);
    // A paired send/recv to self in one batch is NCCL's alone; the cpu backend says so.
    std::vector<float> g(4);
    try {
      pg.batch_isend_irecv({P2POp::send(Buffer(f), rank), P2POp::recv(Buffer(g), rank)});
      ADD_FAILURE() << "a self send/recv pair on the cpu backend was accepted";
    } catch (const InvalidArgumentError& e) {
      EXPECT_NE(std::string(e.what()).find("backend nccl only"), std::string::npos) << e.what();
    }
    EXPECT_THROW(pg.send(f, 5), InvalidArgumentError);
    EXPECT_THROW(pg.all_gather({Buffer(f)}, f), InvalidArgumentError);             // 1 output for 2 ranks
    EXPECT_THROW(pg.all_gather({Buffer(f), Buffer(i)}, f), InvalidArgumentError);  // dtype mismatch
    std::vector<float> big(9);
    EXPECT_THROW(pg.all_gather_into(big, f), InvalidArgumentError);
    EXPECT_THROW(pg.all_to_all_single(f, f, {1, 2}, {2, 2}), InvalidArgumentError);  // splits sum to 3
    EXPECT_THROW(pg.all_reduce(Buffer(static_cast<void*>(nullptr), 3, DataType::kFloat32)), InvalidArgumentError);
    EXPECT_THROW(pg.all_reduce(Buffer(f.data(), 4, DataType::kFloat32, Device::cuda(0))), InvalidArgumentError);
    // The group still works after rejected calls (nothing was sent).
    std::vector<std::int32_t> v{rank + 1};
    pg.all_reduce(v);
    EXPECT_EQ(v[0], 3);
  });
}

TEST_P(PerTransport, MismatchedSizesRaiseAClearError) {
  for (const char* algo : {"all_reduce=ring", "all_reduce=recursive_doubling", "all_reduce=shm"}) {
    const auto start = Clock::now();
    const auto errors = run_ranks_collect(3, quick(GetParam(), algo), [](int rank, ProcessGroup& pg) {
      std::vector<float> v(rank == 1 ? 1000 : 1200, 1.0f);
      pg.all_reduce(v);
    });
    bool named = false;
    for (const auto& e : errors) {
      EXPECT_NE(e, "") << algo << ": every rank must fail";
      named |= e.find("different sizes") != std::string::npos || e.find("mismatched") != std::string::npos;
    }
    EXPECT_TRUE(named) << algo << ": some rank must name the size mismatch; got: " << errors[0] << " | " << errors[1];
    EXPECT_LT(Clock::now() - start, seconds(8)) << algo;
  }
}

// Over tcp the message-passing algorithms send nothing for an empty buffer; empty ranks exchange an empty
// message around the ring instead, so a ring neighbour that passed more names the mismatch.
TEST(Tcp, EmptyVersusNonEmptyAllReduceRaisesAClearError) {
  for (const char* algo : {"all_reduce=ring", "all_reduce=recursive_doubling", ""}) {
    const auto start = Clock::now();
    const auto errors = run_ranks_collect(3, quick("tcp", algo), [](int rank, ProcessGroup& pg) {
      std::vector<float> v(rank == 1 ? 0 : 4096, 1.0f);
      pg.all_reduce(v);
    });
    bool named = false;
    for (const auto& e : errors) {
      EXPECT_NE(e, "") << algo << ": every rank must fail";
      named |= e.find("different sizes") != std::string::npos || e.find("mismatched") != std::string::npos;
    }
    EXPECT_TRUE(named) << algo << ": some rank must name the mismatch; got: " << errors[0] << " | " << errors[1];
    EXPECT_LT(Clock::now() - start, milliseconds(1500)) << algo << ": must fail before the 2 s timeout";
  }
  run_ranks(3, quick("tcp"), [](int, ProcessGroup& pg) {
    std::vector<float> empty;
    pg.all_reduce(empty);
    pg.broadcast(empty, 2);
    std::vector<float> one{1.0f};
    pg.all_reduce(one);
    EXPECT_EQ(one[0], 3.0f);
  });
}

// One rank passing 0 elements used to return before the shared-memory barrier, leaving the others to time out.
TEST(SharedMemory, EmptyVersusNonEmptyRaisesAClearError) {
  using Fn = std::function<void(int, ProcessGroup&)>;
  const std::vector<std::pair<std::string, Fn>> cases = {
      {"all_reduce",
       [](int rank, ProcessGroup& pg) {
         std::vector<float> v(rank == 0 ? 0 : 64, 1.0f);
         pg.all_reduce(v);
       }},
      {"broadcast",
       [](int rank, ProcessGroup& pg) {
         std::vector<float> v(rank == 2 ? 0 : 64, 1.0f);
         pg.broadcast(v, 0);
       }},
      {"all_gather_into",
       [](int rank, ProcessGroup& pg) {
         const std::size_t k = rank == 1 ? 0 : 8;
         std::vector<float> in(k, 1.0f), out(3 * k);
         pg.all_gather_into(out, in);
       }},
  };
  for (const auto& [name, fn] : cases) {
    const auto start = Clock::now();
    const auto errors = run_ranks_collect(3, quick("shm", "shm"), fn);
    for (const auto& e : errors) {
      EXPECT_NE(e.find("mismatched"), std::string::npos) << name << ": every rank must name the mismatch; got: " << e;
    }
    EXPECT_LT(Clock::now() - start, milliseconds(1500)) << name << ": must fail before the 2 s timeout";
  }
  // All ranks empty is fine.
  run_ranks(3, quick("shm", "shm"), [](int, ProcessGroup& pg) {
    std::vector<float> v;
    pg.all_reduce(v);
    pg.broadcast(v, 1);
    std::vector<float> one{1.0f};
    pg.all_reduce(one);
    EXPECT_EQ(one[0], 3.0f);
  });
}

TEST_P(PerTransport, MismatchedOpsRaiseAClearError) {
  const auto errors = run_ranks_collect(2, quick(GetParam(), "all_reduce=recursive_doubling,broadcast=tree"),
                                        [](int rank, ProcessGroup& pg) {
                                          std::vector<float> v(16, 1.0f);
                                          if (rank == 0) {
                                            pg.broadcast(v, 1);
                                          } else {
                                            pg.all_reduce(v);
                                          }
                                          pg.barrier();  // whoever passed the first op fails here at the latest
                                        });
  bool named = false;
  for (const auto& e : errors) {
    EXPECT_NE(e, "");
    named |= e.find("mismatched collectives") != std::string::npos;
  }
  EXPECT_TRUE(named) << errors[0] << " | " << errors[1];
}

TEST_P(PerTransport, AStalledRankMakesTheOthersFailWithinTheTimeout) {
  const auto start = Clock::now();
  const auto errors = run_ranks_collect(4, quick(GetParam()), [](int rank, ProcessGroup& pg) {
    std::vector<float> v(1000, 1.0f);
    if (rank == 3) {
      std::this_thread::sleep_for(seconds(4));  // never joins the all_reduce
      return;
    }
    pg.all_reduce(v);
  });
  for (int r = 0; r < 3; ++r) {
    EXPECT_NE(errors[static_cast<std::size_t>(r)], "") << "rank " << r;
  }
  EXPECT_NE(errors[0].find("timed out"), std::string::npos) << errors[0];
  EXPECT_LT(Clock::now() - start, seconds(8));
}

TEST_P(PerTransport, WorkWaitTimesOutAndReportsCompletion) {
  run_ranks(2, quick(GetParam()), [](int rank, ProcessGroup& pg) {
    std::vector<int> v(8, rank);
    if (rank == 0) {
      auto w = pg.irecv(v, 1, 9);
      EXPECT_FALSE(w->is_completed());
      EXPECT_THROW(w->wait(milliseconds(50)), TimeoutError);
      pg.barrier();  // now rank 1 sends
      w->wait();
      EXPECT_TRUE(w->is_success());
      EXPECT_EQ(v[7], 1);
    } else {
      pg.barrier();
      pg.send(v, 0, 9);
    }
  });
}

TEST_P(PerTransport, SubGroupsAndNonMembers) {
  run_ranks(4, quick(GetParam()), [](int rank, ProcessGroup& pg) {
    auto low = pg.new_group({0, 1});
    auto high = pg.new_group({2, 3});
    auto mine = rank < 2 ? low : high;
    auto other = rank < 2 ? high : low;
    EXPECT_EQ(mine->size(), 2);
    EXPECT_EQ(mine->rank(), rank % 2);
    EXPECT_FALSE(other->is_member());
    std::vector<std::int64_t> v{rank};
    mine->all_reduce(v);
    EXPECT_EQ(v[0], rank < 2 ? 1 : 5);
    EXPECT_THROW(other->all_reduce(v), NotMemberError);
    EXPECT_THROW(pg.new_group({0, 9}), InvalidArgumentError);
  });
}

TEST_P(PerTransport, ShutdownFlushesSendsAndFailsPendingReceivesPromptly) {
  ProcessGroupOptions o = quick(GetParam());
  o.timeout = seconds(60);  // far longer than the bound below: shutdown must not wait for it
  WorkPtr orphan;
  std::vector<int> got(4, 0);
  std::vector<int> v(4, 7);  // outlives the groups: buffers must stay valid until their Work completes
  std::vector<int> never(4, 0);
  const auto start = Clock::now();
  run_ranks(2, o, [&](int rank, ProcessGroup& pg) {
    if (rank == 0) {
      orphan = pg.irecv(never, 1, 99);  // never sent: destroying the group must fail it, not wait for it
      pg.isend(v, 1, 5);                // not waited for: destroying the group must still deliver it
    } else {
      pg.recv(got, 0, 5);
    }
  });
  EXPECT_LT(Clock::now() - start, seconds(5));
  ASSERT_TRUE(orphan);
  EXPECT_TRUE(orphan->is_completed());
  EXPECT_TRUE(orphan->exception() != nullptr);
  EXPECT_EQ(got[3], 7);
}

INSTANTIATE_TEST_SUITE_P(Transports, PerTransport, ::testing::Values("shm", "tcp"));

TEST(InitMethods, FileUrlAndBadUrls) {
  const std::string path = ::testing::TempDir() + "ctcomm-file-init-" + std::to_string(getpid());
  std::remove(path.c_str());
  // tcp:// and env:// are covered by the multi-process examples (they need a fixed port).
  {
    const std::string method = "file://" + path;
    std::vector<std::string> errors(3);
    std::vector<std::thread> threads;
    for (int r = 0; r < 3; ++r) {
      threads.emplace_back([&, r] {
        try {
          ProcessGroupOptions o;
          o.timeout = seconds(10);
          auto pg = ProcessGroup::init(method + "?rank=" + std::to_string(r) + "&world_size=3", o);
          std::vector<int> v{r};
          pg->all_reduce(v);
          if (v[0] != 3) errors[static_cast<std::size_t>(r)] = "wrong sum " + std::to_string(v[0]);
        } catch (const std::exception& e) {
          errors[static_cast<std::size_t>(r)] = e.what();
        }
      });
    }
    for (auto& t : threads) t.join();
    for (const auto& e : errors) EXPECT_EQ(e, "") << method;
  }
  std::remove(path.c_str());
  EXPECT_THROW(ProcessGroup::init("nope://x"), InvalidArgumentError);
  EXPECT_THROW(ProcessGroup::init("tcp://127.0.0.1:1?rank=3&world_size=2"), InvalidArgumentError);
}

// The reader half of the worker env contract (common/worker_env.hpp): under an agent (USE_AGENT_STORE=True)
// env:// connects to the agent's store instead of hosting one, and keeps its keys in the attempt's keyspace.
TEST(InitMethods, EnvUnderAnAgentUsesTheAttemptKeyspaceOfTheContract) {
  namespace we = worker_env;
  store::ServerOptions so;
  so.host = "127.0.0.1";
  so.port = 0;
  auto server = std::make_shared<store::Server>(so);
  server->start();
  const std::map<std::string, std::string> env = {{we::kMasterAddr, "127.0.0.1"},
                                                  {we::kMasterPort, std::to_string(server->port())},
                                                  {we::kRank, "0"},
                                                  {we::kWorldSize, "1"},
                                                  {we::kUseAgentStore, we::kTrue},
                                                  {we::kRestartCount, "3"}};
  for (const auto& [k, v] : env) setenv(k.c_str(), v.c_str(), 1);
  {
    auto rv = init::rendezvous("env://", -1, -1, seconds(5), WorkerEnvironment::from_process());
    EXPECT_EQ(rv.keepalive, nullptr) << "under an agent the worker must not host a store";
    EXPECT_EQ(rv.rank, 0);
    EXPECT_EQ(rv.world_size, 1);
    rv.store->set("k", "v");
    store::TcpStoreOptions co;
    co.port = server->port();
    co.timeout = seconds(5);  // a key elsewhere fails the test in 5 s, not after the default 5 minutes
    store::TcpStore raw(co);
    EXPECT_EQ(raw.get("/worker/attempt_3/k"), "v");  // torch's PrefixStore(f"/worker/attempt_{n}")
  }
  setenv(we::kRestartCount, "three", 1);
  EXPECT_THROW(init::rendezvous("env://", -1, -1, seconds(5), WorkerEnvironment::from_process()), InvalidArgumentError);
  for (const auto& [k, v] : env) unsetenv(k.c_str());
}

// With several nodes the agent names its node's store relay (CTRUN_STORE_RELAY): env:// connects there, MASTER_ADDR
// and MASTER_PORT still naming the store the relay reaches.
TEST(InitMethods, EnvUnderAnAgentWithARelayConnectsThroughIt) {
  namespace we = worker_env;
  store::Server server(store::ServerOptions{.host = "127.0.0.1"});
  server.start();
  store::Relay relay{store::RelayOptions{}};
  relay.start();
  relay.connect("127.0.0.1", server.port());
  const std::map<std::string, std::string> env = {{we::kMasterAddr, "127.0.0.1"},
                                                  {we::kMasterPort, std::to_string(server.port())},
                                                  {we::kStoreRelay, relay.endpoint()},
                                                  {we::kRank, "0"},
                                                  {we::kWorldSize, "1"},
                                                  {we::kUseAgentStore, we::kTrue},
                                                  {we::kRestartCount, "0"}};
  for (const auto& [k, v] : env) setenv(k.c_str(), v.c_str(), 1);
  {
    auto rv = init::rendezvous("env://", -1, -1, seconds(5), WorkerEnvironment::from_process());
    rv.store->set("k", "v");
    EXPECT_EQ(rv.store->get("k"), "v");
    EXPECT_EQ(server.get_local("//worker/attempt_0/k"), "v");
    EXPECT_GE(relay.stats().counters.client_requests, 2u) << "env:// did not go through the relay";
    EXPECT_EQ(server.stats().connections_open, 1u);
  }
  for (const auto& [k, v] : env) unsetenv(k.c_str());
}

TEST(Backends, UnknownOrMissingBackendIsAClearError) {
  auto store = std::make_shared<store::MemoryStore>();
  ProcessGroupOptions o;
  o.backend = "nope";
  EXPECT_THROW(ProcessGroup::from_store(store, "x", 0, 1, o), UnsupportedError);
  EXPECT_THROW(ProcessGroup::from_store(store, "x", 1, 1), InvalidArgumentError);
}

}  // namespace
}  // namespace ctrun::comm::testing
