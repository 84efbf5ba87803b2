// This node's store relay (agent/launch/store_relay.hpp): which jobs get one, and what each worker is told.
#include "agent/launch/store_relay.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "agent/config/job_secret.hpp"
#include "common/auth/secret.hpp"
#include "common/worker_env.hpp"
#include "store/server.hpp"
#include "store/tcp_store.hpp"

namespace ctrun::agent {
namespace {

namespace we = worker_env;

LaunchConfig several_nodes() {
  LaunchConfig c;
  c.rdzv.backend = rdzv::Backend::kC10d;
  c.rdzv.endpoint = "127.0.0.1:29400";
  c.rdzv.min_nodes = 2;
  c.rdzv.max_nodes = 2;
  return c;
}

// With a secret the workers' store takes only proven connections when every node's workers come through a relay
// (each relay proves the secret); otherwise it stays open and the agent says so once at start.
TEST(StoreRelay, TheWorkersStoreNeedsTheSecretOnlyWhenEveryNodeHasARelay) {
  auto secret = std::make_shared<const auth::Secret>("sixteen bytes and more", "test");
  LaunchConfig c = several_nodes();
  EXPECT_FALSE(workers_store_needs_secret(c));  // no secret
  EXPECT_NE(open_doors_warning(c).find("has no secret"), std::string::npos) << open_doors_warning(c);
  c.secret = secret;
  EXPECT_TRUE(workers_store_needs_secret(c));
  EXPECT_EQ(open_doors_warning(c), "");  // every door closed
  LaunchConfig off = c;
  off.rdzv.store_relay = false;
  EXPECT_FALSE(workers_store_needs_secret(off));
  EXPECT_NE(open_doors_warning(off).find("workers' store (MASTER_ADDR:MASTER_PORT) stays open"), std::string::npos);
  EXPECT_NE(open_doors_warning(off).find("--store-relay off"), std::string::npos) << open_doors_warning(off);
  LaunchConfig fixed = c;
  fixed.rdzv.backend = rdzv::Backend::kStatic;  // its store is the rendezvous' too
  EXPECT_FALSE(workers_store_needs_secret(fixed));
  EXPECT_NE(open_doors_warning(fixed).find("--rdzv-backend static"), std::string::npos) << open_doors_warning(fixed);
  LaunchConfig standalone;
  standalone.rdzv.standalone = true;
  standalone.secret = secret;
  EXPECT_FALSE(workers_store_needs_secret(standalone));
  EXPECT_EQ(open_doors_warning(standalone), "");  // one node: loopback and its own address only
}

TEST(StoreRelay, SeveralNodesGetOneUnlessTurnedOff) {
  EXPECT_TRUE(wants_store_relay(several_nodes()));
  LaunchConfig off = several_nodes();
  off.rdzv.store_relay = false;
  EXPECT_FALSE(wants_store_relay(off));
  EXPECT_EQ(NodeStoreRelay::open(off), nullptr);
  LaunchConfig one = several_nodes();
  one.rdzv.max_nodes = one.rdzv.min_nodes = 1;  // c10d with an endpoint, one node: its workers are all here
  EXPECT_FALSE(wants_store_relay(one));
  LaunchConfig standalone;
  standalone.rdzv.standalone = true;
  EXPECT_FALSE(wants_store_relay(standalone));
  LaunchConfig elastic = several_nodes();
  elastic.rdzv.min_nodes = 1;  // --nnodes 1:2
  EXPECT_TRUE(wants_store_relay(elastic));
}

TEST(StoreRelay, WorkersInAgentStoreModeAreToldWhereItIsAndItRelaysToTheAttemptsStore) {
  store::Server job_store(store::ServerOptions{.host = "127.0.0.1"});
  job_store.start();
  auto relay = NodeStoreRelay::open(several_nodes());
  ASSERT_NE(relay, nullptr);
  std::map<std::string, std::string> env = {{we::kMasterAddr, "127.0.0.1"},
                                            {we::kMasterPort, std::to_string(job_store.port())},
                                            {we::kUseAgentStore, we::kTrue}};
  relay->before_start(0, env);
  ASSERT_EQ(env[we::kStoreRelay], relay->endpoint());
  EXPECT_EQ(env[we::kMasterAddr], "127.0.0.1") << "MASTER_ADDR keeps naming the store";
  auto other = env;
  other.erase(we::kStoreRelay);
  relay->before_start(1, other);
  EXPECT_EQ(other[we::kStoreRelay], relay->endpoint());
  const auto ep = we::relay_endpoint(env[we::kStoreRelay]);
  ASSERT_TRUE(ep);
  store::TcpStoreOptions o;
  o.host = ep->first;
  o.port = static_cast<std::uint16_t>(std::stoi(ep->second));
  o.connect_timeout = std::chrono::seconds(5);
  store::TcpStore worker(o);
  worker.set("k", "through the relay");
  EXPECT_EQ(worker.get("k"), "through the relay");
  EXPECT_EQ(job_store.get_local("/k"), "through the relay");
  EXPECT_EQ(job_store.stats().connections_open, 1u);
}

TEST(StoreRelay, WorkersThatHostTheirOwnStoreAreNotPointedAtIt) {
  auto relay = NodeStoreRelay::open(several_nodes());
  ASSERT_NE(relay, nullptr);
  std::map<std::string, std::string> env = {
      {we::kMasterAddr, "127.0.0.1"}, {we::kMasterPort, "29500"}, {we::kUseAgentStore, we::kFalse}};
  relay->before_start(0, env);
  EXPECT_EQ(env.count(we::kStoreRelay), 0u);
  env[we::kUseAgentStore] = we::kTrue;
  env[we::kMasterPort] = "not a port";
  relay->before_start(0, env);
  EXPECT_EQ(env.count(we::kStoreRelay), 0u);
}

TEST(WorkerEnvContract, RelayEndpointIsHostColonPort) {
  EXPECT_EQ(we::relay_endpoint("127.0.0.1:4242"), std::make_pair(std::string("127.0.0.1"), std::string("4242")));
  EXPECT_EQ(we::relay_endpoint("[::1]:4242"), std::make_pair(std::string("::1"), std::string("4242")));
  EXPECT_FALSE(we::relay_endpoint(""));
  EXPECT_FALSE(we::relay_endpoint("4242"));
  EXPECT_FALSE(we::relay_endpoint("host:"));
}

}  // namespace
}  // namespace ctrun::agent
