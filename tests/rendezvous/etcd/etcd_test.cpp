// The etcd backend against real etcd clusters that the tests start (etcd_cluster.hpp): the v3 gateway client, the
// store semantics the rendezvous relies on (etcd_store.hpp), the run lease, watches that wake waiters, failover
// when a member is SIGKILLed, and whole rounds of handlers made by create_handler("etcd"). Skips without etcd.
#include <gtest/gtest.h>

#include <future>
#include <set>
#include <thread>

#include "etcd_cluster.hpp"
#include "rendezvous/etcd/etcd_client.hpp"
#include "rendezvous/etcd/etcd_lease.hpp"
#include "rendezvous/etcd/etcd_store.hpp"
#include "rendezvous/factory.hpp"
#include "rendezvous/keys.hpp"

using namespace ctrun;
using namespace ctrun::rdzv;
using namespace std::chrono_literals;

namespace {

#define SKIP_WITHOUT_ETCD() \
  if (auto reason = ctrun::rdzv::test::EtcdCluster::skip_reason(); !reason.empty()) GTEST_SKIP() << reason

etcd::Options options(const std::string& endpoints, store::Duration request_timeout = 10s) {
  RendezvousParameters p;
  p.backend = "etcd";
  p.endpoint = endpoints;
  auto o = etcd::parse_options(p);
  o.request_timeout = request_timeout;
  o.attempt_timeout = 1s;
  return o;
}

std::shared_ptr<etcd::EtcdStore> store_on(const std::string& endpoints,
                                          std::shared_ptr<etcd::RunLease> lease = nullptr) {
  return std::make_shared<etcd::EtcdStore>(std::make_shared<etcd::Client>(options(endpoints)), lease, 5s);
}

TEST(EtcdStore, KeyLayout) {
  Keys k("job");
  EXPECT_EQ(etcd::EtcdStore::to_etcd(k.joined(3)), "/ctrun/job/r3/joined");
  EXPECT_EQ(etcd::EtcdStore::to_etcd(k.lease()), "/ctrun/job/lease");
  EXPECT_EQ(etcd::EtcdStore::from_etcd("/ctrun/job/r3/joined"), k.joined(3));
}

TEST(EtcdClient, KvTxnLeaseAndWatch) {
  SKIP_WITHOUT_ETCD();
  ctrun::rdzv::test::EtcdCluster cluster(1);
  etcd::Client c(options(cluster.endpoints()));
  const std::string bin("a\0b\xff", 4);  // keys and values are bytes
  auto rev = c.put("/t/" + bin, bin);
  auto r = c.range("/t/" + bin);
  ASSERT_EQ(r.kvs.size(), 1u);
  EXPECT_EQ(r.kvs[0].value, bin);
  EXPECT_EQ(r.kvs[0].mod_revision, rev);
  // txn: compare-and-swap on the revision; the failure branch's range comes back.
  auto t = c.txn({etcd::Compare{etcd::Compare::Target::kMod, "/t/" + bin, rev + 100, {}}}, {etcd::Op::put("/t/x", "1")},
                 {etcd::Op::get("/t/" + bin)});
  EXPECT_FALSE(t.succeeded);
  ASSERT_EQ(t.ranges.size(), 1u);
  EXPECT_EQ(t.ranges[0].kvs.at(0).value, bin);
  t = c.txn({etcd::Compare{etcd::Compare::Target::kMod, "/t/" + bin, rev, {}}}, {etcd::Op::put("/t/x", "1")}, {});
  EXPECT_TRUE(t.succeeded);
  EXPECT_EQ(c.range("/t/", etcd::prefix_end("/t/"), true, true).count, 2);
  // Leases: a key bound to a lease vanishes when the lease ends.
  auto lease = c.lease_grant(5s);
  EXPECT_GT(c.lease_keep_alive(lease), 0);
  c.put("/t/leased", "v", lease);
  c.lease_revoke(lease);
  EXPECT_TRUE(c.range("/t/leased").kvs.empty());
  EXPECT_EQ(c.lease_keep_alive(lease), 0);
  EXPECT_THROW(c.put("/t/y", "v", lease), etcd::EtcdError);
  // Watch: wakes on the put (no polling), times out when none comes.
  auto from = c.range("/t/w").revision + 1;
  auto waiter = std::async(std::launch::async, [&] { return c.watch_put("/t/w", from, store::Clock::now() + 10s); });
  std::this_thread::sleep_for(200ms);
  etcd::Client other(options(cluster.endpoints()));
  const auto put_at = store::Clock::now();
  other.put("/t/w", "1");
  EXPECT_TRUE(waiter.get());
  EXPECT_LT(store::Clock::now() - put_at, 5s);
  EXPECT_FALSE(c.watch_put("/t/none", from, store::Clock::now() + 300ms));
  EXPECT_EQ(c.delete_range("/t/", etcd::prefix_end("/t/")), 3);
}

TEST(EtcdStore, StoreSemantics) {
  SKIP_WITHOUT_ETCD();
  ctrun::rdzv::test::EtcdCluster cluster(1);
  auto s = store_on(cluster.endpoints());
  s->set("ctrun.rdzv.j/a", "1");
  EXPECT_EQ(s->get("ctrun.rdzv.j/a"), "1");
  // compare_set, PyTorch's three cases.
  EXPECT_EQ(s->compare_set("ctrun.rdzv.j/c", "", "x"), "x");   // missing, expected empty: created
  EXPECT_EQ(s->compare_set("ctrun.rdzv.j/c", "", "y"), "x");   // present: not replaced
  EXPECT_EQ(s->compare_set("ctrun.rdzv.j/c", "x", "z"), "z");  // equal: replaced
  EXPECT_EQ(s->compare_set("ctrun.rdzv.j/m", "q", "z"), "q");  // missing, expected non-empty: nothing
  EXPECT_FALSE(s->check({"ctrun.rdzv.j/m"}));
  // add from many threads: no lost update.
  std::vector<std::thread> ts;
  for (int i = 0; i < 4; ++i)
    ts.emplace_back([&] {
      auto mine = store_on(cluster.endpoints());
      for (int k = 0; k < 10; ++k) mine->add("ctrun.rdzv.j/n", 1);
    });
  for (auto& t : ts) t.join();
  EXPECT_EQ(s->add("ctrun.rdzv.j/n", 0), 40);
  EXPECT_EQ(s->get("ctrun.rdzv.j/n"), "40");   // a counter reads as its decimal value
  EXPECT_EQ(s->add("ctrun.rdzv.j/n", 5), 45);  // other deltas, then unit adds again
  EXPECT_EQ(s->add("ctrun.rdzv.j/n", -2), 43);
  EXPECT_EQ(s->add("ctrun.rdzv.j/n", 1), 44);
  EXPECT_EQ(s->multi_get({"ctrun.rdzv.j/n"}), std::vector<std::string>{"44"});
  // This store's marker of the counter vanishes (as with a renewed lease): the next add still goes through, once.
  etcd::Client(options(cluster.endpoints())).delete_range("/ctrun/j/n#w", etcd::prefix_end("/ctrun/j/n#w"));
  EXPECT_EQ(s->add("ctrun.rdzv.j/n", 1), 45);
  s->set("ctrun.rdzv.j/hb", "0");  // a plain number (the decider's heartbeat keys), then counted
  EXPECT_EQ(s->add("ctrun.rdzv.j/hb", 1), 1);
  EXPECT_EQ(s->add("ctrun.rdzv.j/hb", 1), 2);
  s->set("ctrun.rdzv.j/hb", "7");  // a set replaces the counter
  EXPECT_EQ(s->get("ctrun.rdzv.j/hb"), "7");
  EXPECT_EQ(s->add("ctrun.rdzv.j/hb", 1), 8);
  s->append("ctrun.rdzv.j/app", "ab");
  s->append("ctrun.rdzv.j/app", "cd");
  EXPECT_EQ(s->get("ctrun.rdzv.j/app"), "abcd");
  // multi_set/multi_get beyond one txn's 128 operations.
  std::vector<std::string> keys, values;
  for (int i = 0; i < 300; ++i) {
    keys.push_back("ctrun.rdzv.j/many/" + std::to_string(i));
    values.push_back(std::to_string(i * i));
  }
  s->multi_set(keys, values);
  EXPECT_EQ(s->multi_get(keys), values);
  EXPECT_TRUE(s->check(keys));
  keys.push_back("ctrun.rdzv.j/absent");
  EXPECT_FALSE(s->check(keys));
  // wait: woken by a set from another client; times out with the key's name.
  auto waiter = std::async(std::launch::async, [&] { s->wait({"ctrun.rdzv.j/later"}, 10s); });
  std::this_thread::sleep_for(200ms);
  store_on(cluster.endpoints())->set("ctrun.rdzv.j/later", "1");
  EXPECT_EQ(waiter.wait_for(5s), std::future_status::ready);
  waiter.get();
  try {
    s->wait({"ctrun.rdzv.j/never"}, 300ms);
    ADD_FAILURE() << "wait did not time out";
  } catch (const store::TimeoutError& e) {
    EXPECT_NE(std::string(e.what()).find("ctrun.rdzv.j/never"), std::string::npos);
  }
  EXPECT_TRUE(s->delete_key("ctrun.rdzv.j/a"));
  EXPECT_FALSE(s->delete_key("ctrun.rdzv.j/a"));
  auto listed = s->list_keys();
  EXPECT_NE(std::find(listed.begin(), listed.end(), "ctrun.rdzv.j/app"), listed.end());
  EXPECT_EQ(s->num_keys(), static_cast<std::int64_t>(listed.size()));
  EXPECT_THROW(s->queue_push("q", "v"), store::StoreError);
}

TEST(EtcdStore, RunLeaseSharedAndKeysVanish) {
  SKIP_WITHOUT_ETCD();
  ctrun::rdzv::test::EtcdCluster cluster(1);
  const auto key = etcd::EtcdStore::to_etcd(Keys("ttl").lease());
  auto a = std::make_shared<etcd::RunLease>(std::make_shared<etcd::Client>(options(cluster.endpoints())), key, 2s);
  auto b = std::make_shared<etcd::RunLease>(std::make_shared<etcd::Client>(options(cluster.endpoints())), key, 2s);
  EXPECT_EQ(a->id(), b->id());  // one lease per run, whoever came first
  auto s = store_on(cluster.endpoints(), a);
  s->set("ctrun.rdzv.ttl/x", "1");
  std::this_thread::sleep_for(3s);  // longer than the TTL: the keep-alive holds it
  EXPECT_TRUE(s->check({"ctrun.rdzv.ttl/x"}));
  s.reset();  // it holds the lease too
  a.reset();
  b.reset();  // every agent gone: the run vanishes after the TTL
  auto plain = store_on(cluster.endpoints());
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  while (plain->check({"ctrun.rdzv.ttl/x"}) && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(100ms);
  EXPECT_FALSE(plain->check({"ctrun.rdzv.ttl/x"}));
  EXPECT_FALSE(plain->check({"ctrun.rdzv.ttl/lease"}));
}

TEST(EtcdStore, FailsOverWhenAMemberIsKilled) {
  SKIP_WITHOUT_ETCD();
  ctrun::rdzv::test::EtcdCluster cluster(3);
  auto s = store_on(cluster.endpoints());  // talks to member 0 first
  s->set("ctrun.rdzv.f/a", "1");
  auto waiter = std::async(std::launch::async, [&] { s->wait({"ctrun.rdzv.f/b"}, 20s); });
  std::this_thread::sleep_for(300ms);
  cluster.kill(0);  // kill -9 of the member the client and the watch use
  auto other = store_on(cluster.endpoint(1) + "," + cluster.endpoint(2));
  other->set("ctrun.rdzv.f/b", "2");
  EXPECT_EQ(waiter.wait_for(15s), std::future_status::ready);
  waiter.get();
  EXPECT_EQ(s->add("ctrun.rdzv.f/n", 5), 5);
  EXPECT_EQ(s->get("ctrun.rdzv.f/a"), "1");
}

TEST(EtcdStore, ClearErrorWhenEveryMemberIsDown) {
  SKIP_WITHOUT_ETCD();
  auto cluster = std::make_unique<ctrun::rdzv::test::EtcdCluster>(1);
  auto endpoints = cluster->endpoints();
  auto s = std::make_shared<etcd::EtcdStore>(std::make_shared<etcd::Client>(options(endpoints, 2s)), nullptr, 5s);
  s->set("ctrun.rdzv.d/a", "1");
  cluster.reset();
  const auto start = std::chrono::steady_clock::now();
  try {
    s->get("ctrun.rdzv.d/a");
    ADD_FAILURE() << "no error with etcd down";
  } catch (const store::StoreError& e) {
    EXPECT_NE(std::string(e.what()).find(endpoints), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("etcd cluster"), std::string::npos) << e.what();
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, 10s);  // request_timeout (2 s) plus slack
}

// Three handlers made as the agent makes them (create_handler, backend etcd) rendezvous through a 3-member cluster,
// then one member is SIGKILLed and the next round still completes.
TEST(EtcdHandler, RoundsSurviveAMemberLoss) {
  SKIP_WITHOUT_ETCD();
  ctrun::rdzv::test::EtcdCluster cluster(3);
  RendezvousParameters p;
  p.backend = "etcd-v3";
  p.endpoint = cluster.endpoints();
  p.run_id = "h3";
  p.min_nodes = p.max_nodes = 3;
  p.config = {{"join_timeout", "30"},
              {"last_call_timeout", "0.1"},
              {"keep_alive_interval", "1"},
              {"read_timeout", "10"},
              {"lease_ttl", "10"}};
  std::vector<std::unique_ptr<Handler>> hs;
  for (int i = 0; i < 3; ++i) {
    hs.push_back(create_handler(p, NodeSpec{std::string("127.0.0.") + std::to_string(2 + i), 2, "default"}));
    hs.back()->set_worker_store_address(std::string("127.0.0.") + std::to_string(2 + i),
                                        static_cast<std::uint16_t>(7000 + i));
    EXPECT_EQ(hs.back()->backend(), "etcd");
  }
  auto all = [&] {
    std::vector<std::future<RoundInfo>> fs;
    for (auto& h : hs) fs.push_back(std::async(std::launch::async, [&h] { return h->next_rendezvous(); }));
    std::vector<RoundInfo> out;
    for (auto& f : fs) out.push_back(f.get());
    return out;
  };
  auto r0 = all();
  std::set<int> ranks;
  for (const auto& r : r0) {
    ranks.insert(r.group_rank);
    EXPECT_EQ(r.global_world_size, 6);
    EXPECT_EQ(r.master_addr, "127.0.0.2");
    EXPECT_EQ(r.master_port, 7000);
  }
  EXPECT_EQ(ranks, (std::set<int>{0, 1, 2}));
  EXPECT_EQ(hs[0]->num_nodes_waiting(), 0);
  cluster.kill(0);
  auto r1 = all();  // every node re-rendezvous (as after a worker failure)
  for (const auto& r : r1) EXPECT_EQ(r.round, r0[0].round + 1);
  std::vector<std::future<bool>> barrier;  // needs all three
  for (int i = 0; i < 3; ++i)
    barrier.push_back(std::async(std::launch::async, [&, i] { return hs[i]->exit_barrier(10s); }));
  for (auto& b : barrier) EXPECT_TRUE(b.get());
  for (auto& h : hs) EXPECT_TRUE(h->shutdown());
  auto late = create_handler(p, NodeSpec{"127.0.0.9", 1, "default"});
  late->set_worker_store_address("127.0.0.9", 7009);
  EXPECT_THROW(late->next_rendezvous(), RendezvousClosedError);
}

// Each member's own short lease: the key it binds in the round vanishes with the lease, and the next member round
// the ring ends the round at once (the heartbeat here would take a minute). A leave is no death.
TEST(EtcdHandler, AMemberWhoseLeaseEndsIsDeclaredDead) {
  SKIP_WITHOUT_ETCD();
  ctrun::rdzv::test::EtcdCluster cluster(1);
  RendezvousParameters p;
  p.backend = "etcd";
  p.endpoint = cluster.endpoints();
  p.min_nodes = p.max_nodes = 2;
  p.config = {{"join_timeout", "30"}, {"last_call_timeout", "0.1"}, {"keep_alive_interval", "30"},
              {"read_timeout", "10"}, {"lease_ttl", "10"},          {"member_ttl", "2"}};
  etcd::Client raw(options(cluster.endpoints()));
  auto alive_key = [&](const std::string& run, std::uint64_t round, int rank) {
    return etcd::EtcdStore::to_etcd(Keys(run).alive(round, rank));
  };
  auto wait_for = [](auto predicate) {
    const auto deadline = std::chrono::steady_clock::now() + 10s;
    while (!predicate() && std::chrono::steady_clock::now() < deadline) std::this_thread::sleep_for(50ms);
    return predicate();
  };
  for (const std::string run : {"md", "ml"}) {
    p.run_id = run;
    std::vector<std::unique_ptr<Handler>> hs;
    for (int i = 0; i < 2; ++i) {
      hs.push_back(create_handler(p, NodeSpec{std::string("127.0.0.") + std::to_string(2 + i), 1, "default"}));
      hs.back()->set_worker_store_address("127.0.0.2", static_cast<std::uint16_t>(7000 + i));
    }
    std::vector<std::future<RoundInfo>> fs;
    for (auto& h : hs) fs.push_back(std::async(std::launch::async, [&h] { return h->next_rendezvous(); }));
    std::vector<RoundInfo> rounds;
    for (auto& f : fs) rounds.push_back(f.get());
    const auto round = rounds[0].round;
    // Both keys are written by the members' loss threads, each bound to a lease of its own.
    ASSERT_TRUE(wait_for([&] {
      return !raw.range(alive_key(run, round, 0)).kvs.empty() && !raw.range(alive_key(run, round, 1)).kvs.empty();
    }));
    const auto lease0 = raw.range(alive_key(run, round, 0)).kvs.at(0).lease;
    const auto lease1 = raw.range(alive_key(run, round, 1)).kvs.at(0).lease;
    EXPECT_NE(lease0, 0);
    EXPECT_NE(lease0, lease1);
    std::this_thread::sleep_for(3s);  // longer than member_ttl: the keep-alives hold both
    EXPECT_FALSE(hs[0]->round_broken());
    const int victim = rounds[0].group_rank == 1 ? 0 : 1;  // the handler whose node is group rank 1
    if (run == "md") {
      raw.lease_revoke(lease1);  // as if the agent of group rank 1 was killed
      EXPECT_TRUE(wait_for([&] { return hs[1 - victim]->round_broken(); }));
      const auto why = hs[1 - victim]->restart_reason();
      EXPECT_EQ(why.rfind("dead: node 127.0.0.", 0), 0u) << why;
      EXPECT_NE(why.find("(group rank 1) is gone: its etcd lease expired"), std::string::npos) << why;
    } else {
      hs[victim]->leave();  // records its exit, then revokes its lease
      EXPECT_TRUE(raw.range(alive_key(run, round, 1)).kvs.empty());
      EXPECT_TRUE(wait_for([&] { return hs[1 - victim]->round_broken(); }));
      std::this_thread::sleep_for(1s);  // a watcher's poll came and went
      const auto why = hs[1 - victim]->restart_reason();
      EXPECT_EQ(why.rfind("leave: ", 0), 0u) << why;
    }
  }
}

}  // namespace
