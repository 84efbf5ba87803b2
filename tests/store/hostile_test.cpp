// Hostile and heavy input against an in-process server: random bytes and huge length prefixes on many
// connections at once, a client that never reads its replies, a 2000-connection ADD storm, and mass
// disconnects mid-WAIT. The server must stay up, keep serving a well-behaved client, hold bounded memory
// (VmRSS of this process, which hosts the server) and leave no state behind.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/resource.h>

#include <random>
#include <set>
#include <thread>

#include "store/server.hpp"
#include "tests/store/raw_socket.hpp"
#include "tests/support/proc.hpp"
#include "tests/support/wait.hpp"

namespace ctrun::store {
namespace {

using namespace std::chrono_literals;
using ctrun::test::eventually;
using test::bytes_field;
using test::le32;
using test::le64;
using test::RawSocket;
using test::read_le64;

// ASan keeps freed memory in quarantine (256 MiB by default), so RSS bounds only mean something without it.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr std::uint64_t kRssSlackKib = 1024 * 1024;
#else
constexpr std::uint64_t kRssSlackKib = 64 * 1024;
#endif

std::uint64_t rss_kib() { return ctrun::test::proc_status_kib(::getpid(), "VmRSS"); }

void raise_fd_limit(rlim_t want) {
  rlimit rl{};
  getrlimit(RLIMIT_NOFILE, &rl);
  if (rl.rlim_cur < want) {
    rl.rlim_cur = std::min(want, rl.rlim_max);
    setrlimit(RLIMIT_NOFILE, &rl);
  }
}

std::unique_ptr<Server> start_server(std::uint64_t max_total = 256ull << 20) {
  ServerOptions o;
  o.host = "127.0.0.1";
  o.max_total_bytes = max_total;
  auto s = std::make_unique<Server>(o);
  s->start();
  return s;
}

// A well-behaved legacy client round trip: ADD key 1, returns the new value.
std::int64_t good_add(RawSocket& s, const std::string& key) {
  std::string add(1, 3);
  bytes_field(add, key);
  le64(add, 1);
  if (!s.send_all(add)) return -1;
  auto r = s.recv_exact(8, 5s);
  return r.size() == 8 ? static_cast<std::int64_t>(read_le64(r)) : -1;
}

TEST(Hostile, RandomBytesAndHugeLengthsOnManyConnections) {
  auto server = start_server();
  RawSocket good("127.0.0.1", server->port());
  ASSERT_EQ(good_add(good, "/good"), 1);
  const auto rss_before = rss_kib();

  std::mt19937_64 rng(12345);
  std::vector<std::string> payloads;
  // Huge length prefixes in both dialects, up to 2^64-1, for keys, values and counts.
  for (std::uint64_t len : {~0ull, 1ull << 63, 1ull << 40, 1ull << 32, 8ull * 1024 * 1024 + 1}) {
    for (char op : {'\x00', '\x01', '\x02', '\x03', '\x04', '\x05'}) {  // legacy SET..WAIT
      std::string p(1, op);
      le64(p, len);
      payloads.push_back(p);
    }
    for (char op : {'\x01', '\x03', '\x05', '\x06', '\x0a', '\x0b'}) {  // v2 SET, GET, CHECK, WAIT, MULTI_*
      std::string p("\x00\xce\xf7\x85\x3c", 5);
      p.push_back(op);
      le64(p, len);
      payloads.push_back(p);
    }
  }
  // A value length just under the limit, with only a little of it sent: must not be preallocated.
  for (int i = 0; i < 32; ++i) {
    std::string p(1, '\x00');
    bytes_field(p, "/drip");
    le64(p, 8ull * 1024 * 1024);
    p += std::string(1000, 'x');
    payloads.push_back(p);
  }
  // Random garbage of random sizes.
  for (int i = 0; i < 200; ++i) {
    std::string p(rng() % 65536 + 1, '\0');
    for (auto& c : p) c = static_cast<char>(rng());
    payloads.push_back(p);
  }

  // All at once: open every hostile connection, send, then check the good client mid-flight.
  std::vector<RawSocket> hostile;
  hostile.reserve(payloads.size());
  for (const auto& p : payloads) {
    hostile.emplace_back("127.0.0.1", server->port());
    hostile.back().send_all(p);  // may fail once the server closed it: that is the point
  }
  EXPECT_EQ(good_add(good, "/good"), 2);
  // Every connection with a huge length prefix is closed by the server on its own.
  std::size_t closed_by_server = 0;
  for (std::size_t i = 0; i < payloads.size() - 232; ++i)
    if (hostile[i].recv_until_close(5s).has_value()) ++closed_by_server;
  EXPECT_EQ(closed_by_server, payloads.size() - 232);
  hostile.clear();  // the rest: the clients leave

  EXPECT_EQ(good_add(good, "/good"), 3);
  EXPECT_TRUE(eventually([&] { return server->stats().connections_open == 1; }))
      << server->stats().connections_open << " connections still open";
  EXPECT_TRUE(eventually([&] { return server->stats().pending_waits == 0; }));
  const auto rss_after = rss_kib();
  // 32 dripping 8 MiB claims + 200 x 64 KiB of garbage would be > 260 MiB if sizes were trusted.
  EXPECT_LT(rss_after, rss_before + kRssSlackKib) << "RSS grew from " << rss_before << " to " << rss_after << " KiB";
  EXPECT_GE(server->stats().connections_rejected, payloads.size() - 232);
}

TEST(Hostile, ClientThatNeverReadsIsThrottledNotBuffered) {
  auto server = start_server();
  RawSocket setter("127.0.0.1", server->port());
  std::string set(1, 0);
  bytes_field(set, "/big");
  bytes_field(set, std::string(1 << 20, 'b'));
  ASSERT_TRUE(setter.send_all(set));
  ASSERT_EQ(good_add(setter, "/fence"), 1);
  const auto rss_before = rss_kib();

  // Pipelines GET /big (1 MiB reply each) and never reads. Non-blocking: stop when the server stops reading.
  RawSocket hog("127.0.0.1", server->port());
  int flags = fcntl(hog.fd(), F_GETFL);
  fcntl(hog.fd(), F_SETFL, flags | O_NONBLOCK);
  std::string get(1, 2);
  bytes_field(get, "/big");
  std::string burst;
  for (int i = 0; i < 1000; ++i) burst += get;  // would be 1000 MiB of replies
  std::size_t sent = 0;
  auto end = std::chrono::steady_clock::now() + 3s;
  while (sent < burst.size() && std::chrono::steady_clock::now() < end) {
    ssize_t n = ::send(hog.fd(), burst.data() + sent, burst.size() - sent, MSG_NOSIGNAL);
    if (n > 0)
      sent += static_cast<std::size_t>(n);
    else
      std::this_thread::sleep_for(10ms);
  }
  std::this_thread::sleep_for(200ms);
  const auto rss_after = rss_kib();
  EXPECT_LT(rss_after, rss_before + kRssSlackKib) << "RSS grew from " << rss_before << " to " << rss_after << " KiB";
  EXPECT_EQ(good_add(setter, "/fence"), 2);  // others are still served
  hog.close();
  EXPECT_TRUE(eventually([&] { return server->stats().connections_open == 1; }));
}

TEST(Hostile, TwoThousandConnectionsEachAddInit) {
  constexpr int kConns = 2000;
  raise_fd_limit(2 * kConns + 256);  // client and server ends live in this process
  auto server = start_server();
  std::vector<RawSocket> socks(kConns);
  std::string add(1, 3);  // legacy ADD "init/" 1, exactly what a 1.13 TCPStore(world_size=N) sends
  bytes_field(add, "init/");
  le64(add, 1);
  for (auto& s : socks) {
    s.connect("127.0.0.1", server->port());
    ASSERT_TRUE(s.send_all(add));
  }
  std::set<std::uint64_t> replies;
  for (auto& s : socks) {
    auto r = s.recv_exact(8, 20s);
    ASSERT_EQ(r.size(), 8u);
    replies.insert(read_le64(r));
  }
  EXPECT_EQ(replies.size(), static_cast<std::size_t>(kConns));  // each of 1..2000 exactly once
  EXPECT_EQ(*replies.begin(), 1u);
  EXPECT_EQ(*replies.rbegin(), static_cast<std::uint64_t>(kConns));
  EXPECT_EQ(server->get_local("init/"), std::optional<std::string>(std::to_string(kConns)));
  EXPECT_EQ(server->stats().connections_open, static_cast<std::uint64_t>(kConns));
  socks.clear();
  EXPECT_TRUE(eventually([&] { return server->stats().connections_open == 0; }));
}

TEST(Hostile, MassDisconnectMidWaitLeavesNoState) {
  auto server = start_server();
  {
    std::vector<RawSocket> waiters(300);
    for (std::size_t i = 0; i < waiters.size(); ++i) {
      waiters[i].connect("127.0.0.1", server->port());
      std::string wait(1, 5);  // legacy WAIT on a shared and a private key
      le64(wait, 2);
      bytes_field(wait, "/shared");
      bytes_field(wait, "/mine" + std::to_string(i));
      ASSERT_TRUE(waiters[i].send_all(wait));
      if (i % 2) {
        // Half of them reset the connection instead of closing it cleanly.
        linger l{1, 0};
        setsockopt(waiters[i].fd(), SOL_SOCKET, SO_LINGER, &l, sizeof l);
      }
    }
    EXPECT_TRUE(eventually([&] { return server->stats().pending_waits == waiters.size(); }));
  }
  EXPECT_TRUE(eventually([&] { return server->stats().pending_waits == 0; }))
      << server->stats().pending_waits << " waits left";
  EXPECT_TRUE(eventually([&] { return server->stats().connections_open == 0; }));
  RawSocket s("127.0.0.1", server->port());
  std::string set(1, 0);
  bytes_field(set, "/shared");
  bytes_field(set, "x");
  ASSERT_TRUE(s.send_all(set));
  EXPECT_EQ(good_add(s, "/after"), 1);
}

}  // namespace
}  // namespace ctrun::store
