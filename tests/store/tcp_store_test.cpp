// TcpStore client against our embedded server in both dialects, plus scripted fake servers for the paths a
// real server cannot be made to take on demand (the cancel race, a hung server, a wrong-dialect peer).

#include "store/tcp_store.hpp"
#include "tests/support/port_reservation.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <memory>
#include <thread>

#include "store/server.hpp"
#include "tests/store/store_checks.hpp"

namespace ctrun::test {
namespace {

using store::ServerOptions;
using store::TcpStore;
using store::TcpStoreOptions;
using store::protocol::Dialect;

TcpStoreOptions options_for(std::uint16_t port, Dialect d) {
  TcpStoreOptions o;
  o.port = port;
  o.dialect = d;
  o.timeout = std::chrono::seconds(10);
  o.connect_timeout = std::chrono::seconds(5);
  return o;
}

std::uint64_t accepted(store::Server& s) { return s.stats().connections_accepted; }

class TcpStoreBothDialects : public ::testing::TestWithParam<Dialect> {
 protected:
  void SetUp() override { server_.start(); }
  void TearDown() override { server_.stop(); }
  TcpStoreOptions options() { return options_for(server_.port(), GetParam()); }
  std::unique_ptr<TcpStore> client() { return std::make_unique<TcpStore>(options()); }
  StoreFactory factory() {
    return [this] { return std::unique_ptr<store::Store>(client()); };
  }
  store::Server server_{ServerOptions{.host = "127.0.0.1"}};
};

INSTANTIATE_TEST_SUITE_P(Dialects, TcpStoreBothDialects, ::testing::Values(Dialect::kV2, Dialect::kLegacy),
                         [](const auto& info) { return info.param == Dialect::kV2 ? "V2" : "Legacy"; });

TEST_P(TcpStoreBothDialects, SetGetBinaryAndOneMiB) { check_set_get(*client()); }
TEST_P(TcpStoreBothDialects, AddStoresDecimal) { check_add(*client()); }
TEST_P(TcpStoreBothDialects, AddErrorsAsEveryStore) { check_add_errors(factory()); }
TEST_P(TcpStoreBothDialects, CompareSetThreeCases) { check_compare_set(*client()); }
TEST_P(TcpStoreBothDialects, CheckDeleteNumKeys) { check_check_delete_num_keys(*client()); }
TEST_P(TcpStoreBothDialects, MultiGetSetAppend) { check_multi_and_append(*client()); }
TEST_P(TcpStoreBothDialects, DeferredMultiKeyWait) { check_deferred_wait(*client(), factory()); }
TEST_P(TcpStoreBothDialects, WaitTimeout) { check_wait_timeout(*client(), factory()); }
TEST_P(TcpStoreBothDialects, Barrier) { check_barrier(factory(), 4); }
TEST_P(TcpStoreBothDialects, ThreadSafeSharedClient) { check_thread_safety(*client()); }
TEST_P(TcpStoreBothDialects, BigMulti) { check_big_multi(*client()); }
TEST_P(TcpStoreBothDialects, Queues) {
  if (GetParam() == Dialect::kLegacy) GTEST_SKIP() << "queues are v2-only (torch >= 2.8)";
  check_queues(*client(), factory());
}
TEST_P(TcpStoreBothDialects, CompareSetWakesAndListKeys) {
  if (GetParam() == Dialect::kLegacy) GTEST_SKIP() << "LIST_KEYS is v2-only";
  check_compare_set_wakes_and_list_keys(*client(), factory());
}

TEST_P(TcpStoreBothDialects, KeysArePrefixedExceptInit) {
  auto o = options();
  o.add_init_key = true;
  TcpStore a(o), b(o);
  EXPECT_EQ(server_.get_local("init/"), "2");
  a.set("k", "v");
  EXPECT_TRUE(a.check({"k"}));  // SET has no reply: a round trip makes sure the server has applied it
  EXPECT_EQ(server_.get_local("/k"), "v");
  EXPECT_EQ(server_.get_local("k"), std::nullopt);
  o.key_prefix = "";
  o.add_init_key = false;
  TcpStore raw(o);
  EXPECT_EQ(raw.get("/k"), "v");
}

// A timed-out wait: v2 cancels on the same connection; legacy (no CANCEL_WAIT in torch <= 2.0) drops the
// connection and reconnects on the next call. Either way the next replies are the right ones.
TEST_P(TcpStoreBothDialects, WaitTimeoutConnectionHandling) {
  auto s = client();
  s->num_keys();  // a legacy connect has no handshake: make sure the server has accepted it before counting
  auto before = accepted(server_);
  EXPECT_THROW(s->wait({"never"}, std::chrono::milliseconds(100)), store::TimeoutError);
  client()->set("never", "late");  // would produce a stray STOP_WAITING on a still-registered connection
  EXPECT_EQ(s->get("never"), "late");
  EXPECT_EQ(s->add("n", 1), 1);
  auto reconnects = accepted(server_) - before - 1;  // minus the helper client
  EXPECT_EQ(reconnects, GetParam() == Dialect::kV2 ? 0u : 1u);
  // The server forgets the abandoned wait (legacy: when it sees the disconnect, so allow it a moment).
  for (int i = 0; i < 100 && server_.stats().pending_waits != 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_EQ(server_.stats().pending_waits, 0u);
}

TEST_P(TcpStoreBothDialects, StoppedServerGivesStoreErrorThenConnectError) {
  auto o = options();
  o.connect_timeout = std::chrono::milliseconds(300);
  TcpStore s(o);
  s.set("k", "v");
  server_.stop();
  auto t0 = std::chrono::steady_clock::now();
  EXPECT_THROW(s.add("k2", 1), store::StoreError);
  try {
    s.num_keys();
    ADD_FAILURE() << "num_keys succeeded on a stopped server";
  } catch (const store::StoreError& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find("127.0.0.1:" + std::to_string(o.port)), std::string::npos) << msg;
    EXPECT_NE(msg.find("300 ms"), std::string::npos) << msg;
  }
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(5));
}

// ---- v2-only operations ----
class TcpStoreV2 : public ::testing::Test {
 protected:
  void SetUp() override { server_.start(); }
  void TearDown() override { server_.stop(); }
  std::unique_ptr<TcpStore> client() { return std::make_unique<TcpStore>(options_for(server_.port(), Dialect::kV2)); }
  store::Server server_{ServerOptions{.host = "127.0.0.1"}};
};

// With no dialect given, the client detects v2 on our server (one PING, no extra connection).
TEST(TcpStoreDetect, DetectsV2OnOurServer) {
  store::Server server(ServerOptions{.host = "127.0.0.1"});
  server.start();
  TcpStoreOptions o;
  o.port = server.port();
  o.connect_timeout = std::chrono::seconds(5);
  TcpStore s(o);
  EXPECT_EQ(s.dialect(), Dialect::kV2);
  s.ping();
  EXPECT_EQ(accepted(server), 1u);
  s.set("k", "v");
  EXPECT_EQ(s.get("k"), "v");
}

TEST_F(TcpStoreV2, PingEchoes) {
  auto s = client();
  s->ping();
  s->ping();
  EXPECT_EQ(s->add("x", 1), 1);
}

TEST_F(TcpStoreV2, ListKeysStripsPrefixAndDropsInit) {
  auto o = options_for(server_.port(), Dialect::kV2);
  o.add_init_key = true;
  TcpStore s(o);
  s.set("a", "1");
  s.set("b/c", "2");
  server_.set_local("no_slash", "x");
  auto keys = s.list_keys();
  std::sort(keys.begin(), keys.end());
  EXPECT_EQ(keys, (std::vector<std::string>{"a", "b/c"}));
}

TEST_F(TcpStoreV2, Queues) {
  auto s = client();
  EXPECT_EQ(s->queue_len("q"), 0);
  EXPECT_EQ(s->queue_pop("q", false), std::nullopt);
  s->queue_push("q", "one");
  s->queue_push("q", std::string("t\0o", 3));
  EXPECT_EQ(s->queue_len("q"), 2);
  EXPECT_TRUE(s->check({"q"})) << "a non-empty queue counts as present";
  EXPECT_EQ(s->queue_pop("q", false), "one");
  EXPECT_EQ(s->queue_pop("q", true), std::string("t\0o", 3));
  // A blocking pop is woken by a push from another client.
  std::thread pusher([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    client()->queue_push("q", "late");
  });
  EXPECT_EQ(s->queue_pop("q", true), "late");
  pusher.join();
  s->set_timeout(std::chrono::milliseconds(100));
  EXPECT_THROW(s->queue_pop("q", true), store::TimeoutError);
}

TEST_F(TcpStoreV2, BarrierTimeoutCancelsAndConnectionStaysUsable) {
  auto s = client();
  s->num_keys();
  auto before = accepted(server_);
  try {
    s->barrier("b", 3, std::chrono::milliseconds(150));
    ADD_FAILURE() << "barrier of 3 with 1 participant returned";
  } catch (const store::TimeoutError& e) {
    EXPECT_NE(std::string(e.what()).find("'b'"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("150 ms"), std::string::npos) << e.what();
  }
  EXPECT_EQ(s->add("after", 1), 1);
  EXPECT_EQ(accepted(server_), before) << "v2 barrier timeout must not reconnect";
}

// ---- connecting ----
using ctrun::test::PortReservation;

TEST(TcpStoreConnect, NothingListeningErrorNamesEndpointTimeoutAndWhatToCheck) {
  PortReservation reserved;  // bound, never listening: every connection is refused
  auto port = reserved.port();
  auto o = options_for(port, Dialect::kV2);
  o.connect_timeout = std::chrono::milliseconds(400);
  auto t0 = std::chrono::steady_clock::now();
  try {
    TcpStore s(o);
    ADD_FAILURE() << "connected to a closed port";
  } catch (const store::StoreError& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find("127.0.0.1:" + std::to_string(port)), std::string::npos) << msg;
    EXPECT_NE(msg.find("400 ms"), std::string::npos) << msg;
    EXPECT_NE(msg.find("refused"), std::string::npos) << msg;
    EXPECT_NE(msg.find("Check"), std::string::npos) << msg;
  }
  auto took = std::chrono::steady_clock::now() - t0;
  EXPECT_GE(took, std::chrono::milliseconds(390));
  EXPECT_LT(took, std::chrono::seconds(3));
}

TEST(TcpStoreConnect, RetriesUntilTheServerStarts) {
  PortReservation reserved;  // refused until the server binds it (SO_REUSEADDR) and listens; nobody else can
  auto port = reserved.port();
  store::Server server(ServerOptions{.host = "127.0.0.1", .port = port});
  std::thread late([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    server.start();
  });
  auto o = options_for(port, Dialect::kV2);
  o.connect_timeout = std::chrono::seconds(10);
  o.add_init_key = true;
  auto t0 = std::chrono::steady_clock::now();
  TcpStore s(o);
  late.join();
  EXPECT_GE(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(250));
  EXPECT_EQ(server.get_local("init/"), "1");
  server.stop();
}

// ---- scripted fake servers ----
// Listens on 127.0.0.1, accepts one connection and runs script(fd) on a thread.
class FakeServer {
 public:
  explicit FakeServer(std::function<void(int)> script) {
    listen_fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(::bind(listen_fd_, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
    EXPECT_EQ(::listen(listen_fd_, 4), 0);
    socklen_t len = sizeof(a);
    ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&a), &len);
    port_ = ntohs(a.sin_port);
    thread_ = std::thread([this, script = std::move(script)] {
      int fd = ::accept(listen_fd_, nullptr, nullptr);
      if (fd < 0) return;
      script(fd);
      ::close(fd);
    });
  }
  ~FakeServer() {
    ::shutdown(listen_fd_, SHUT_RDWR);  // unblocks accept if nobody connected
    thread_.join();
    ::close(listen_fd_);
  }
  std::uint16_t port() const { return port_; }

  static std::string read_n(int fd, std::size_t n) {
    std::string s(n, '\0');
    std::size_t got = 0;
    while (got < n) {
      ssize_t r = ::recv(fd, s.data() + got, n - got, 0);
      if (r <= 0) return s.substr(0, got);
      got += static_cast<std::size_t>(r);
    }
    return s;
  }
  static void write_all(int fd, std::string_view s) {
    ASSERT_EQ(::send(fd, s.data(), s.size(), MSG_NOSIGNAL), static_cast<ssize_t>(s.size()));
  }
  // v2 handshake: VALIDATE (5 bytes) + PING (5 bytes) -> echo the nonce.
  static void handshake(int fd) {
    auto hello = read_n(fd, 10);
    ASSERT_EQ(hello.size(), 10u);
    ASSERT_EQ(hello.substr(0, 5), std::string("\x00\xce\xf7\x85\x3c", 5));
    ASSERT_EQ(hello[5], '\x0d');
    write_all(fd, hello.substr(6, 4));
  }

 private:
  int listen_fd_ = -1;
  std::uint16_t port_ = 0;
  std::thread thread_;
};

// The server answers the WAIT just as the client cancels: STOP_WAITING then WAIT_CANCELED. The keys did
// appear, so the wait succeeds, and the stream stays in sync for the next request.
TEST(TcpStoreFakeServer, CancelRaceStopWaitingThenCanceled) {
  FakeServer fake([](int fd) {
    FakeServer::handshake(fd);
    auto wait = FakeServer::read_n(fd, 1 + 8 + 8 + 2);  // WAIT, count 1, key "/k"
    ASSERT_EQ(wait[0], '\x06');
    auto cancel = FakeServer::read_n(fd, 1);
    ASSERT_EQ(cancel, "\x0c");
    FakeServer::write_all(fd, std::string("\x00\x01", 2));
    auto getnum = FakeServer::read_n(fd, 1);
    ASSERT_EQ(getnum, "\x07");
    FakeServer::write_all(fd, std::string("\x2a\0\0\0\0\0\0\0", 8));
    FakeServer::read_n(fd, 1);  // until the client closes
  });
  TcpStore s(options_for(fake.port(), Dialect::kV2));
  s.wait({"k"}, std::chrono::milliseconds(100));
  EXPECT_EQ(s.num_keys(), 42);
}

TEST(TcpStoreFakeServer, HungServerGivesStoreErrorAtTheDeadline) {
  FakeServer fake([](int fd) {
    FakeServer::handshake(fd);
    FakeServer::read_n(fd, 1);  // GETNUMKEYS, never answered
    FakeServer::read_n(fd, 1);  // until the client gives up and closes
  });
  auto o = options_for(fake.port(), Dialect::kV2);
  o.timeout = std::chrono::milliseconds(200);
  TcpStore s(o);
  auto t0 = std::chrono::steady_clock::now();
  try {
    s.num_keys();
    ADD_FAILURE() << "no error from a hung server";
  } catch (const store::StoreError& e) {
    EXPECT_NE(std::string(e.what()).find("GETNUMKEYS"), std::string::npos) << e.what();
  }
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(3));
}

// A v2 client at a server that drops the handshake (e.g. a torch <= 2.0 server): a connect error that says
// to use the legacy dialect.
TEST(TcpStoreFakeServer, WrongDialectHint) {
  FakeServer fake([](int fd) { FakeServer::read_n(fd, 10); });  // read the handshake, then close
  auto o = options_for(fake.port(), Dialect::kV2);
  o.connect_timeout = std::chrono::milliseconds(300);
  try {
    TcpStore s(o);
    ADD_FAILURE() << "connected without a PING reply";
  } catch (const store::StoreError& e) {
    EXPECT_NE(std::string(e.what()).find("legacy dialect"), std::string::npos) << e.what();
  }
}

// ctrun's ON_CLOSE: the server appends the registered value when the client's connection closes (the process
// died), waking whoever waits on the key; a withdrawn registration appends nothing.
TEST(TcpStoreOnClose, AppendsWhenTheConnectionClosesNotWhenCancelled) {
  store::Server server{ServerOptions{.host = "127.0.0.1"}};
  server.start();
  auto opts = options_for(server.port(), Dialect::kV2);
  TcpStore watcher(opts);
  auto owner = std::make_unique<TcpStore>(opts);
  ASSERT_TRUE(owner->append_on_close("lost", "-1,", "+1,"));
  ASSERT_TRUE(owner->append_on_close("other", "-1,", "+1,"));
  owner->cancel_on_close("other");
  owner->set("alive", "1");
  EXPECT_FALSE(watcher.check({"lost"}));
  std::thread closer([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    owner.reset();
  });
  watcher.wait({"lost"}, std::chrono::seconds(10));  // woken by the close
  closer.join();
  EXPECT_EQ(watcher.get("lost"), "-1,");
  EXPECT_FALSE(watcher.check({"other"}));
}

// A connection lost while the client lives (here: the server restarted on its port): the client's next request
// reconnects, appends its on_reconnect value and registers again, so that a later close is still reported.
TEST(TcpStoreOnClose, AReconnectSaysSoAndRegistersAgain) {
  PortReservation port;  // held for the test: only these servers bind it (SO_REUSEADDR)
  auto first = std::make_unique<store::Server>(ServerOptions{.host = "127.0.0.1", .port = port.port()});
  first->start();
  auto opts = options_for(port.port(), Dialect::kV2);
  opts.connect_timeout = std::chrono::seconds(10);
  auto owner = std::make_unique<TcpStore>(opts);
  owner->set_connect_timeout(std::chrono::seconds(10));
  ASSERT_TRUE(owner->append_on_close("lost", "-1,", "+1,"));
  first.reset();
  store::Server second{ServerOptions{.host = "127.0.0.1", .port = port.port()}};
  second.start();
  TcpStore watcher(opts);
  std::string error;
  for (int i = 0; i < 3; ++i) {  // the first request finds the old connection closed and fails on it
    try {
      owner->add("x", 1);
      break;
    } catch (const store::StoreError& e) {
      error = e.what();
    }
  }
  ASSERT_TRUE(watcher.check({"x"})) << error;
  EXPECT_EQ(watcher.get("lost"), "+1,");
  owner.reset();
  std::string log;
  for (int i = 0; i < 100 && log != "+1,-1,"; ++i) {
    log = watcher.get("lost");
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_EQ(log, "+1,-1,");
}

TEST(TcpStoreOnClose, NotInTheLegacyDialect) {
  store::Server server{ServerOptions{.host = "127.0.0.1"}};
  server.start();
  TcpStore s(options_for(server.port(), Dialect::kLegacy));
  EXPECT_FALSE(s.append_on_close("lost", "-1,", "+1,"));
  s.set("still", "usable");
  EXPECT_EQ(s.get("still"), "usable");
}

}  // namespace
}  // namespace ctrun::test
