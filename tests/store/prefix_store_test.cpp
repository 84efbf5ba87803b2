// PrefixStore: PyTorch's key joining (prefix + "/" + key, "//" for a prefix ending in "/", nesting
// concatenates), num_keys unfiltered, list_keys filtered and stripped; over MemoryStore and over TcpStore.

#include "store/prefix_store.hpp"

#include <gtest/gtest.h>

#include <algorithm>

#include "store/memory_store.hpp"
#include "store/server.hpp"
#include "store/tcp_store.hpp"
#include "tests/store/store_checks.hpp"

namespace ctrun::test {
namespace {

using store::MemoryStore;
using store::PrefixStore;

std::vector<std::string> sorted(std::vector<std::string> v) {
  std::sort(v.begin(), v.end());
  return v;
}

TEST(PrefixStore, JoinsKeysLikePyTorch) {
  auto base = std::make_shared<MemoryStore>();
  PrefixStore p("/worker/attempt_0", base);
  EXPECT_EQ(p.join_key("rank_1"), "/worker/attempt_0/rank_1");
  p.set("rank_1", "vm");
  EXPECT_EQ(base->get("/worker/attempt_0/rank_1"), "vm");

  // A prefix ending in "/" yields "//", as 2.x group prefixes do; nesting concatenates.
  auto inner = std::make_shared<PrefixStore>("default_pg", base);
  PrefixStore group("0/", inner);
  group.set("k", "v");
  EXPECT_EQ(base->get("default_pg/0//k"), "v");
  EXPECT_EQ(group.get("k"), "v");
}

TEST(PrefixStore, NumKeysIsNotFiltered) {
  auto base = std::make_shared<MemoryStore>();
  base->set("outside", "1");
  PrefixStore p("pre", base);
  p.set("a", "1");
  EXPECT_EQ(p.num_keys(), 2);
  EXPECT_EQ(p.num_keys(), base->num_keys());
}

TEST(PrefixStore, ListKeysFilteredAndStripped) {
  auto base = std::make_shared<MemoryStore>();
  base->set("outside", "1");
  base->set("prefix", "no slash: not ours");
  base->set("pre/x", "other prefix");
  auto p = std::make_shared<PrefixStore>("prefix", base);
  p->set("a", "1");
  p->set("b/c", "2");
  EXPECT_EQ(sorted(p->list_keys()), (std::vector<std::string>{"a", "b/c"}));
  PrefixStore nested("b", p);
  EXPECT_EQ(nested.list_keys(), (std::vector<std::string>{"c"}));
}

TEST(PrefixStore, AllOpsGoThroughThePrefix) {
  auto base = std::make_shared<MemoryStore>(std::chrono::seconds(10));
  auto p = std::make_shared<PrefixStore>("p", base);
  check_set_get(*p);
  check_add(*p);
  check_compare_set(*p);
  check_check_delete_num_keys(*p);
  check_multi_and_append(*p);
  EXPECT_TRUE(base->check({"p/add/c", "p/cs/created", "p/ma/ap"}));
  EXPECT_FALSE(base->check({"add/c"}));

  p->queue_push("q", "one");
  EXPECT_EQ(base->queue_len("p/q"), 1);
  EXPECT_EQ(p->queue_pop("q", false), "one");
  EXPECT_EQ(p->queue_pop("q", false), std::nullopt);

  std::thread t([&] { PrefixStore("p", base).barrier("bar", 2, std::chrono::seconds(10)); });
  p->barrier("bar", 2, std::chrono::seconds(10));
  t.join();
  EXPECT_TRUE(base->check({"p/bar"}));

  p->set_timeout(std::chrono::milliseconds(1234));
  EXPECT_EQ(base->timeout(), std::chrono::milliseconds(1234));
}

TEST(PrefixStore, WaitTimeoutNamesUnprefixedKeyAndPrefix) {
  auto base = std::make_shared<MemoryStore>();
  PrefixStore p("job7", base);
  try {
    p.wait({"missing"}, std::chrono::milliseconds(50));
    ADD_FAILURE() << "no timeout";
  } catch (const store::TimeoutError& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find("'missing'"), std::string::npos) << msg;
    EXPECT_NE(msg.find("job7"), std::string::npos) << msg;
    EXPECT_NE(msg.find("50 ms"), std::string::npos) << msg;
  }
}

TEST(PrefixStore, OverTcpStoreBothDialects) {
  store::Server server(store::ServerOptions{.host = "127.0.0.1"});
  server.start();
  for (auto dialect : {store::protocol::Dialect::kV2, store::protocol::Dialect::kLegacy}) {
    store::TcpStoreOptions o;
    o.port = server.port();
    o.dialect = dialect;
    o.timeout = std::chrono::seconds(10);
    auto tcp = std::make_shared<store::TcpStore>(o);
    std::string prefix = dialect == store::protocol::Dialect::kV2 ? "/worker/attempt_0" : "legacy";
    PrefixStore p(prefix, tcp);
    check_set_get(p);
    check_add(p);
    check_compare_set(p);
    check_wait_timeout(p, [&] { return std::make_unique<PrefixStore>(prefix, std::make_shared<store::TcpStore>(o)); });
    // On the wire: TcpStore's "/" + prefix + "/" + key.
    EXPECT_EQ(server.get_local("/" + prefix + "/add/c"), "-2");
  }
  // list_keys over TcpStore (v2): TcpStore strips its "/", PrefixStore strips "prefix/".
  store::TcpStoreOptions o;
  o.port = server.port();
  PrefixStore p("/worker/attempt_0", std::make_shared<store::TcpStore>(o));
  auto keys = p.list_keys();
  EXPECT_NE(std::find(keys.begin(), keys.end(), "add/c"), keys.end());
  EXPECT_EQ(std::find(keys.begin(), keys.end(), "legacy/add/c"), keys.end());
  server.stop();
}

}  // namespace
}  // namespace ctrun::test
