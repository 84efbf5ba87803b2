// The store relay (store/relay.hpp) between real clients and a real store server: every Store behaviour through it in
// both dialects, one connection at the store, identical requests sent once, the loss of the store, hostile clients,
// and the server's tagged mode (MULTIPLEX) on the wire.
#include "store/relay.hpp"

#include <gtest/gtest.h>

#include <boost/asio.hpp>

#include <atomic>
#include <chrono>
#include <memory>
#include <set>
#include <thread>
#include <vector>

#include "common/auth/secret.hpp"
#include "store/prefix_store.hpp"
#include "store/server.hpp"
#include "store/tcp_store.hpp"
#include "tests/store/raw_socket.hpp"
#include "tests/store/store_checks.hpp"
#include "tests/support/wait.hpp"

namespace ctrun::test {
namespace {

using store::Relay;
using store::RelayOptions;
using store::ServerOptions;
using store::TcpStore;
using store::TcpStoreOptions;
using store::protocol::Dialect;
using store::test::bytes_field;
using store::test::le32;
using store::test::le64;
using store::test::RawSocket;

TcpStoreOptions client_options(std::uint16_t port, Dialect d,
                               std::chrono::milliseconds connect_timeout = std::chrono::seconds(5)) {
  TcpStoreOptions o;
  o.port = port;
  o.dialect = d;
  o.timeout = std::chrono::seconds(10);
  o.connect_timeout = connect_timeout;
  return o;
}

// A client of a relay that turns clients away: it keeps retrying (as torch's does) for this long, then fails.
constexpr std::chrono::milliseconds kTurnedAway{300};

std::uint64_t ops(store::Server& s, const std::string& name) {
  for (const auto& [op, n] : s.stats().ops)
    if (op == name) return n;
  return 0;
}

// A store, and a relay pointed at it (as an agent points its node's relay at the job's store).
class RelayFixture {
 public:
  RelayFixture() {
    server.start();
    relay.start();
    relay.connect("127.0.0.1", server.port());
    EXPECT_TRUE(eventually([&] { return relay.stats().upstream_ready; }, std::chrono::seconds(10)));
  }
  store::Server server{ServerOptions{.host = "127.0.0.1"}};
  Relay relay{RelayOptions{}};
};

class RelayBothDialects : public ::testing::TestWithParam<Dialect>, public RelayFixture {
 protected:
  std::unique_ptr<TcpStore> client() { return std::make_unique<TcpStore>(client_options(relay.port(), GetParam())); }
  StoreFactory factory() {
    return [this] { return std::unique_ptr<store::Store>(client()); };
  }
};

INSTANTIATE_TEST_SUITE_P(Dialects, RelayBothDialects, ::testing::Values(Dialect::kV2, Dialect::kLegacy),
                         [](const auto& info) { return info.param == Dialect::kV2 ? "V2" : "Legacy"; });

// Every behaviour a store has, through the relay.
TEST_P(RelayBothDialects, SetGetBinaryAndOneMiB) { check_set_get(*client()); }
TEST_P(RelayBothDialects, AddStoresDecimal) { check_add(*client()); }
TEST_P(RelayBothDialects, AddErrorsAsEveryStore) { check_add_errors(factory()); }
TEST_P(RelayBothDialects, CompareSetThreeCases) { check_compare_set(*client()); }
TEST_P(RelayBothDialects, CheckDeleteNumKeys) { check_check_delete_num_keys(*client()); }
TEST_P(RelayBothDialects, MultiGetSetAppend) { check_multi_and_append(*client()); }
TEST_P(RelayBothDialects, DeferredMultiKeyWait) { check_deferred_wait(*client(), factory()); }
TEST_P(RelayBothDialects, WaitTimeout) { check_wait_timeout(*client(), factory()); }
TEST_P(RelayBothDialects, Barrier) { check_barrier(factory(), 4); }
TEST_P(RelayBothDialects, ThreadSafeSharedClient) { check_thread_safety(*client()); }
TEST_P(RelayBothDialects, BigMulti) { check_big_multi(*client()); }
TEST_P(RelayBothDialects, Queues) {
  if (GetParam() == Dialect::kLegacy) GTEST_SKIP() << "queues are v2-only (torch >= 2.8)";
  check_queues(*client(), factory());
}
TEST_P(RelayBothDialects, CompareSetWakesAndListKeys) {
  if (GetParam() == Dialect::kLegacy) GTEST_SKIP() << "LIST_KEYS is v2-only";
  check_compare_set_wakes_and_list_keys(*client(), factory());
}
TEST_P(RelayBothDialects, PrefixStoreAsTorchAgentStoreMode) {
  auto base = std::shared_ptr<store::Store>(client());
  store::PrefixStore attempt("/worker/attempt_0", base);
  attempt.set("default_pg/0/0/rank_0", "x");
  EXPECT_EQ(attempt.get("default_pg/0/0/rank_0"), "x");  // after the SET, which has no reply
  EXPECT_EQ(server.get_local("//worker/attempt_0/default_pg/0/0/rank_0"), "x");
}

TEST_P(RelayBothDialects, TheStoreHoldsOneConnectionForAllTheRelaysClients) {
  std::vector<std::unique_ptr<TcpStore>> clients;
  for (int i = 0; i < 8; ++i) {
    auto o = client_options(relay.port(), GetParam());
    o.add_init_key = true;  // as torch's TCPStore(world_size=N)
    clients.push_back(std::make_unique<TcpStore>(o));
  }
  EXPECT_EQ(server.get_local("init/"), "8");
  EXPECT_EQ(server.stats().connections_open, 1u) << "one tagged connection: the relay's";
  EXPECT_GE(relay.stats().server.connections_open, 8u);
}

TEST_P(RelayBothDialects, ConcurrentAddsGetDistinctResultsAndWaitsGoUpOnce) {
  constexpr int kRanks = 8;
  std::vector<std::unique_ptr<TcpStore>> clients;
  for (int i = 0; i < kRanks; ++i) clients.push_back(client());
  // Every rank waits for the key rank 0 of another node will write (NCCL's id exchange), then adds once.
  std::vector<std::thread> threads;
  std::vector<std::int64_t> results(kRanks);
  std::atomic<int> waiting{0};
  for (int i = 0; i < kRanks; ++i)
    threads.emplace_back([&, i] {
      ++waiting;
      clients[i]->wait({"nccl/id"}, std::chrono::seconds(20));
      EXPECT_EQ(clients[i]->get("nccl/id"), "id-bytes");
      results[i] = clients[i]->add("arrived", 1);
    });
  ASSERT_TRUE(eventually([&] { return waiting == kRanks && relay.stats().counters.client_requests >= kRanks; },
                         std::chrono::seconds(10)));
  // Joined while the first was in flight: one WAIT at the store.
  EXPECT_TRUE(eventually([&] { return server.stats().pending_waits == 1; }, std::chrono::seconds(5)));
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ(ops(server, "WAIT"), 1u);
  server.set_local("/nccl/id", "id-bytes");
  for (auto& t : threads) t.join();
  std::set<std::int64_t> distinct(results.begin(), results.end());
  EXPECT_EQ(distinct.size(), static_cast<std::size_t>(kRanks));
  EXPECT_EQ(*distinct.begin(), 1);
  EXPECT_EQ(*distinct.rbegin(), kRanks);
  const auto counters = relay.stats().counters;
  EXPECT_LT(counters.upstream_requests, counters.client_requests);
  EXPECT_LE(ops(server, "GET"), static_cast<std::uint64_t>(kRanks));
}

TEST_P(RelayBothDialects, ALostStoreDisconnectsEveryClientAtOnce) {
  auto waiter = client();
  auto idle = client();
  std::atomic<bool> failed{false};
  std::chrono::steady_clock::time_point failed_at;
  std::thread t([&] {
    try {
      waiter->wait({"never"}, std::chrono::seconds(20));
    } catch (const store::StoreError&) {
      failed_at = std::chrono::steady_clock::now();
      failed = true;
    }
  });
  ASSERT_TRUE(eventually([&] { return server.stats().pending_waits == 1; }, std::chrono::seconds(5)));
  // A raw connection that sent nothing (torch 1.13's idle callback connection) is closed too.
  RawSocket raw("127.0.0.1", relay.port());
  ASSERT_TRUE(eventually([&] { return relay.stats().server.connections_open >= 3; }, std::chrono::seconds(5)));
  const auto lost = std::chrono::steady_clock::now();
  server.stop();
  EXPECT_TRUE(raw.recv_until_close(std::chrono::seconds(1)).has_value()) << "the idle connection was not closed";
  t.join();
  ASSERT_TRUE(failed) << "the waiting client was left waiting";
  EXPECT_LT(failed_at - lost, std::chrono::seconds(1));
  EXPECT_FALSE(relay.stats().upstream_ready);
  // Later clients are turned away until the relay is pointed at a store again.
  EXPECT_THROW(TcpStore(client_options(relay.port(), GetParam(), kTurnedAway)).get("k"), store::StoreError);
}

// ---- hostile clients: each loses its own connection; the others are served ----

class RelayHostile : public ::testing::Test, public RelayFixture {};

TEST_F(RelayHostile, GarbageLosesOnlyItsOwnConnection) {
  TcpStore good(client_options(relay.port(), Dialect::kV2));
  good.set("k", "v");
  RawSocket bad("127.0.0.1", relay.port());
  ASSERT_TRUE(bad.send_all(std::string("\x00\xCE\xF7\x85\x3C\xEE\xEE\xEE garbage", 14)));
  EXPECT_TRUE(bad.recv_until_close(std::chrono::seconds(5)).has_value());
  RawSocket huge("127.0.0.1", relay.port());
  std::string claim(1, '\x02');  // legacy GET with a key length of 2^63
  le64(claim, 1ull << 63);
  ASSERT_TRUE(huge.send_all(claim));
  EXPECT_TRUE(huge.recv_until_close(std::chrono::seconds(5)).has_value());
  EXPECT_EQ(good.get("k"), "v");
  EXPECT_EQ(server.stats().connections_open, 1u) << "the relay's own connection survives its clients' garbage";
}

TEST_F(RelayHostile, ARequestTheStoreRefusesLosesOnlyThatClient) {
  TcpStore good(client_options(relay.port(), Dialect::kV2));
  good.set("n", "not a number");
  RawSocket legacy("127.0.0.1", relay.port());
  std::string get_missing(1, '\x02');  // legacy GET of a missing key: the legacy servers close the connection
  bytes_field(get_missing, "/missing");
  ASSERT_TRUE(legacy.send_all(get_missing));
  EXPECT_TRUE(legacy.recv_until_close(std::chrono::seconds(5)).has_value());
  EXPECT_THROW(good.add("n", 1), store::StoreError) << "ADD on a non-number closes the connection";
  EXPECT_EQ(good.get("n"), "not a number") << "the client reconnects; the relay goes on";
  EXPECT_EQ(server.stats().connections_open, 1u);
}

TEST_F(RelayHostile, ConnectionBoundCommandsAreRefused) {
  RawSocket s("127.0.0.1", relay.port());
  std::string req("\x00\xCE\xF7\x85\x3C", 5);
  req.push_back(static_cast<char>(store::protocol::kOnCloseOpcode));
  bytes_field(req, "/k");
  bytes_field(req, "v");
  le64(req, 1);
  ASSERT_TRUE(s.send_all(req));
  EXPECT_TRUE(s.recv_until_close(std::chrono::seconds(5)).has_value());
}

// ---- the upstream is not a ctrun store, or there is none ----

TEST(RelayUpstream, AStoreWithoutTaggedModeIsNamedAndItsClientsTurnedAway) {
  // A listener that answers every connection by closing it, as torch's server does on an unknown opcode.
  boost::asio::io_context io;
  boost::asio::ip::tcp::acceptor acceptor(io, {boost::asio::ip::make_address("127.0.0.1"), 0});
  std::atomic<bool> stop{false};
  std::thread closer([&] {
    while (!stop) {
      boost::system::error_code ec;
      acceptor.non_blocking(true);
      auto s = acceptor.accept(ec);
      if (!ec) {
        char buf[64];
        s.read_some(boost::asio::buffer(buf), ec);  // its VALIDATE + MULTIPLEX
        s.close();
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  });
  Relay relay{RelayOptions{}};
  relay.start();
  EXPECT_THROW(TcpStore(client_options(relay.port(), Dialect::kV2, kTurnedAway)).get("k"), store::StoreError)
      << "not pointed at a store yet";
  relay.connect("127.0.0.1", acceptor.local_endpoint().port());
  EXPECT_TRUE(eventually([&] { return !relay.stats().upstream.empty(); }, std::chrono::seconds(5)));
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  EXPECT_FALSE(relay.stats().upstream_ready);
  EXPECT_THROW(TcpStore(client_options(relay.port(), Dialect::kV2, kTurnedAway)).get("k"), store::StoreError);
  stop = true;
  closer.join();
}

TEST(RelayUpstream, ANewStoreClosesThePreviousAttemptsClients) {
  store::Server a{ServerOptions{.host = "127.0.0.1"}}, b{ServerOptions{.host = "127.0.0.1"}};
  a.start();
  b.start();
  Relay relay{RelayOptions{}};
  relay.start();
  relay.connect("127.0.0.1", a.port());
  TcpStore first(client_options(relay.port(), Dialect::kV2));
  first.set("k", "a");
  EXPECT_EQ(first.get("k"), "a");
  EXPECT_EQ(a.get_local("/k"), "a");
  RawSocket old("127.0.0.1", relay.port());
  ASSERT_TRUE(eventually([&] { return relay.stats().server.connections_open >= 2; }, std::chrono::seconds(5)));
  relay.connect("127.0.0.1", b.port());
  EXPECT_TRUE(old.recv_until_close(std::chrono::seconds(5)).has_value());
  TcpStore second(client_options(relay.port(), Dialect::kV2));
  second.set("k", "b");
  EXPECT_EQ(second.get("k"), "b");
  EXPECT_EQ(b.get_local("/k"), "b");
  EXPECT_TRUE(eventually([&] { return a.stats().connections_open == 0; }, std::chrono::seconds(5)));
}

// With the job's secret the relay proves it before its first request (issue 40), so that the workers' store can take
// only the nodes' relays; a relay with another secret, or none, is turned away and says why.
TEST(RelayUpstream, ProvesTheJobsSecretToAStoreThatRequiresIt) {
  auto secret = std::make_shared<const auth::Secret>("the job's secret", "test");
  store::Server server{ServerOptions{.host = "127.0.0.1", .secret = secret}};
  server.start();
  RelayOptions options;
  options.upstream_secret = secret;
  Relay relay{options};
  relay.start();
  relay.connect("127.0.0.1", server.port());
  TcpStore client(client_options(relay.port(), Dialect::kV2));  // before the handshake ends: queued, then sent
  client.set("k", "v");
  EXPECT_EQ(client.get("k"), "v");
  EXPECT_EQ(server.get_local("/k"), "v");
  EXPECT_TRUE(relay.stats().upstream_ready);
  EXPECT_EQ(server.stats().connections_open, 1u);

  for (auto other :
       {std::make_shared<const auth::Secret>("another job's secret", "test"), std::shared_ptr<const auth::Secret>()}) {
    RelayOptions wrong;
    wrong.upstream_secret = other;
    wrong.connect_timeout = std::chrono::milliseconds(2000);
    Relay stranger{wrong};
    stranger.start();
    stranger.connect("127.0.0.1", server.port());
    EXPECT_THROW(TcpStore(client_options(stranger.port(), Dialect::kV2, kTurnedAway)).get("k"), store::StoreError);
    EXPECT_FALSE(stranger.stats().upstream_ready);
  }
  EXPECT_EQ(server.get_local("/k"), "v");
}

TEST(RelayUpstream, RelaysShareOneGivenIoContext) {
  store::Server server{ServerOptions{.host = "127.0.0.1"}};
  server.start();
  boost::asio::io_context io;
  std::vector<std::unique_ptr<Relay>> relays;
  for (int i = 0; i < 3; ++i) {
    relays.push_back(std::make_unique<Relay>(RelayOptions{}, &io));
    relays.back()->start();
    relays.back()->connect("127.0.0.1", server.port());
  }
  auto guard = boost::asio::make_work_guard(io);
  std::thread loop([&] { io.run(); });
  std::vector<std::int64_t> got;
  for (auto& r : relays) {
    TcpStore c(client_options(r->port(), Dialect::kV2));
    got.push_back(c.add("shared", 1));
  }
  EXPECT_EQ(got, (std::vector<std::int64_t>{1, 2, 3}));
  EXPECT_EQ(server.stats().connections_open, 3u);
  boost::asio::post(io, [&] {
    for (auto& r : relays) r->stop();
    guard.reset();
  });
  loop.join();
  relays.clear();
}

// ---- the server's tagged mode on the wire (docs/protocol.md "Tagged mode") ----

std::string hello() {
  std::string s("\x00\xCE\xF7\x85\x3C", 5);
  s.push_back(static_cast<char>(store::protocol::kMultiplexOpcode));
  le32(s, store::protocol::kMultiplexVersion);
  return s;
}
std::string tagged(std::uint64_t tag, char opcode, const std::vector<std::string>& keys) {
  std::string s;
  le64(s, tag);
  s.push_back(opcode);
  le64(s, keys.size());
  for (const auto& k : keys) bytes_field(s, k);
  return s;
}
std::string frame(std::uint64_t tag, std::string body, char status = 0) {
  std::string s;
  le64(s, tag);
  s.push_back(status);
  return s + body;
}

TEST(TaggedMode, AWaitDoesNotHoldBackLaterRepliesAndIsAnsweredUnderItsTag) {
  store::Server server{ServerOptions{.host = "127.0.0.1"}};
  server.start();
  RawSocket s("127.0.0.1", server.port());
  ASSERT_TRUE(s.send_all(hello()));
  EXPECT_EQ(s.recv_exact(4), std::string("\x01\x00\x00\x00", 4)) << "the version granted";
  // WAIT (6) under tag 7, then CHECK (5) under tag 8: the CHECK is answered while the WAIT is pending.
  ASSERT_TRUE(s.send_all(tagged(7, 6, {"/a"}) + tagged(8, 5, {"/a"})));
  EXPECT_EQ(s.recv_exact(10), frame(8, std::string(1, '\x01')));
  // A second wait under tag 9, canceled by its tag: WAIT_CANCELED under 9.
  std::string cancel;
  le64(cancel, 9);
  cancel.push_back(12);
  ASSERT_TRUE(s.send_all(tagged(9, 6, {"/b"}) + cancel));
  EXPECT_EQ(s.recv_exact(10), frame(9, std::string(1, '\x01')));
  server.set_local("/a", "x");
  EXPECT_EQ(s.recv_exact(10), frame(7, std::string(1, '\x00')));
  // A GET of a missing key (3) is refused in a frame; the connection goes on.
  std::string get;
  le64(get, 10);
  get.push_back(3);
  bytes_field(get, "/missing");
  ASSERT_TRUE(s.send_all(get));
  const std::string refused = s.recv_exact(9);
  EXPECT_EQ(refused, frame(10, "", '\x01'));
  const std::string len = s.recv_exact(8);
  ASSERT_EQ(len.size(), 8u);
  EXPECT_NE(s.recv_exact(store::test::read_le64(len)).find("missing"), std::string::npos);
  std::string num;
  le64(num, 11);
  num.push_back(7);  // GETNUMKEYS
  ASSERT_TRUE(s.send_all(num));
  std::string one;
  le64(one, 1);
  EXPECT_EQ(s.recv_exact(17), frame(11, one));
  EXPECT_EQ(server.stats().pending_waits, 0u);
}

TEST(TaggedMode, IsGrantedOnce) {
  store::Server server{ServerOptions{.host = "127.0.0.1"}};
  server.start();
  RawSocket twice("127.0.0.1", server.port());
  std::string again = hello();
  le64(again, 1);  // a second MULTIPLEX, as a tagged frame
  again.push_back(static_cast<char>(store::protocol::kMultiplexOpcode));
  le32(again, 1);
  ASSERT_TRUE(twice.send_all(again));
  const auto got = twice.recv_until_close(std::chrono::seconds(5));
  ASSERT_TRUE(got.has_value()) << "not closed";
  EXPECT_EQ(*got, std::string("\x01\x00\x00\x00", 4));
}

}  // namespace
}  // namespace ctrun::test
