// The hostile probes of issue 12 as regression tests against a real `ctstore` process, with small but
// telling sizes. Each asserts: the offender is refused or closed, an unrelated client's PING stays under a
// bound while it happens, the server's peak RSS (VmHWM of /proc/PID/status) stays under a bound, and the
// server keeps serving afterwards. Bounds are generous (the CI machine is shared); measured values are
// printed (grep "probe:") and recorded in docs/benchmarks.md.
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/socket.h>

#include <atomic>
#include <cstdio>
#include <filesystem>
#include <regex>
#include <thread>

#include "tests/store/raw_socket.hpp"
#include "tests/support/ctstore.hpp"
#include "tests/support/files.hpp"
#include "tests/support/proc.hpp"
#include "tests/support/wait.hpp"

namespace ctrun::store {
namespace {

using namespace std::chrono_literals;
using ctrun::test::CtstoreChild;
using ctrun::test::listening_port;
using test::bytes_field;
using test::le32;
using test::le64;
using test::RawSocket;
using test::read_le64;

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr std::uint64_t kSanitizerSlackKib = 1024 * 1024;
#else
constexpr std::uint64_t kSanitizerSlackKib = 0;
#endif
// An unrelated client's PING must be answered within this while a probe runs (target ~50 ms on an idle
// machine; generous here because the test machine is shared and loaded: at a load average of 24 on 2 cores
// the WATCH fan-out probe saw 480 ms).
constexpr double kPingBoundMs = 2500;
// The WAIT on 131 072 keys is registered in slices of 4096 keys, but decoding the 3 MB request (131 072
// key copies) is still one step: 146 ms worst PING at load 19 on 2 cores (1.7 s before slicing at load 24;
// the quadratic version took 28 s on an idle machine). Bounded a little more loosely than the others.
constexpr double kBigWaitPingBoundMs = 4000;

// v2 frames.
std::string v2_hello() {
  std::string s(1, 0);
  le32(s, 0x3C85F7CE);
  return s;
}
std::string v2_ping(std::uint32_t nonce) {
  std::string s(1, 13);
  le32(s, nonce);
  return s;
}
std::string v2_set(std::string_view k, std::string_view v) {
  std::string s(1, 1);
  bytes_field(s, k);
  bytes_field(s, v);
  return s;
}
std::string v2_keys(std::uint8_t op, const std::vector<std::string>& keys) {
  std::string s(1, static_cast<char>(op));
  le64(s, keys.size());
  for (const auto& k : keys) bytes_field(s, k);
  return s;
}
std::string v2_get(std::string_view k) {
  std::string s(1, 3);
  bytes_field(s, k);
  return s;
}
constexpr std::uint8_t kV2Wait = 6, kV2MultiGet = 10, kV2QueuePush = 14;

// A server under test: ctstore with its stderr in a temp file, and a pinger measuring an unrelated
// client's PING round trips in the background.
class Probe {
 public:
  explicit Probe(std::vector<std::string> flags, std::vector<std::string> wrapper = {}) {
    log_ = (std::filesystem::temp_directory_path() /
            ("ctstore_probe_" + std::to_string(::getpid()) + "_" + std::to_string(counter_++) + ".log"))
               .string();
    flags.insert(flags.end(), {"--port", "0", "--host", "127.0.0.1"});
    child_ = std::make_unique<CtstoreChild>(flags, log_, wrapper);
    port_ = listening_port(*child_);
    base_kib_ = ctrun::test::proc_status_kib(child_->pid(), "VmRSS");
  }
  ~Probe() {
    stop_pinger();
    child_.reset();
    std::filesystem::remove(log_);
  }
  std::uint16_t port() const { return port_; }
  pid_t pid() const { return child_->pid(); }
  std::uint64_t base_kib() const { return base_kib_; }
  std::uint64_t peak_kib() const { return ctrun::test::proc_status_kib(child_->pid(), "VmHWM"); }
  std::string log() const { return ctrun::test::read_file(log_); }
  CtstoreChild& child() { return *child_; }

  void start_pinger() {
    pinger_ = std::thread([this] {
      RawSocket s("127.0.0.1", port_);
      s.send_all(v2_hello());
      for (std::uint32_t n = 1; !stop_.load(); ++n) {
        auto t0 = std::chrono::steady_clock::now();
        if (!s.send_all(v2_ping(n))) break;
        auto r = s.recv_exact(4, 30s);
        auto dt = std::chrono::steady_clock::now() - t0;
        if (r.size() != 4) {
          ping_failed_ = true;
          break;
        }
        auto us = std::chrono::duration_cast<std::chrono::microseconds>(dt).count();
        if (us > max_ping_us_) max_ping_us_ = us;
        ++pings_;
        std::this_thread::sleep_for(2ms);
      }
    });
    // At least one round trip before the probe starts.
    for (int i = 0; i < 500 && pings_.load() == 0; ++i) std::this_thread::sleep_for(2ms);
  }
  // Stops the pinger; the worst PING round trip seen, in ms.
  double stop_pinger() {
    stop_ = true;
    if (pinger_.joinable()) pinger_.join();
    return max_ping_us_.load() / 1000.0;
  }
  bool ping_failed() const { return ping_failed_; }
  long pings() const { return pings_; }

  // The server still answers a fresh client's PING.
  bool still_answers() {
    RawSocket s("127.0.0.1", port_);
    if (!s.send_all(v2_hello() + v2_ping(99))) return false;
    return s.recv_exact(4, 10s).size() == 4;
  }
  // The server still answers a fresh client (SET + GET round trip).
  bool still_serves() {
    RawSocket s("127.0.0.1", port_);
    std::string m = v2_hello() + v2_set("after", "ok") + v2_get("after");
    if (!s.send_all(m)) return false;
    auto r = s.recv_exact(10, 10s);
    return r.size() == 10 && r.substr(8) == "ok";
  }

 private:
  static inline int counter_ = 0;
  std::string log_;
  std::unique_ptr<CtstoreChild> child_;
  std::uint16_t port_ = 0;
  std::uint64_t base_kib_ = 0;
  std::thread pinger_;
  std::atomic<bool> stop_{false};
  std::atomic<bool> ping_failed_{false};
  std::atomic<long> max_ping_us_{0};
  std::atomic<long> pings_{0};
};

// Sends without blocking past the deadline (the server may stop reading an offender); bytes sent.
std::size_t send_for(RawSocket& s, std::string_view data, std::chrono::milliseconds limit) {
  auto end = std::chrono::steady_clock::now() + limit;
  std::size_t sent = 0;
  while (sent < data.size() && std::chrono::steady_clock::now() < end) {
    ssize_t n = ::send(s.fd(), data.data() + sent, data.size() - sent, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      sent += static_cast<std::size_t>(n);
      continue;
    }
    if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) break;
    pollfd p{s.fd(), POLLOUT, 0};
    ::poll(&p, 1, 20);
  }
  return sent;
}

// True if the server closes the connection within the limit (reading and discarding what comes first).
bool closed_by_server(RawSocket& s, std::chrono::milliseconds limit) { return s.recv_until_close(limit).has_value(); }

// The server serves a new client within a few seconds (a closed connection's slot frees asynchronously).
template <typename P>
bool eventually_serves(P& p) {
  return ctrun::test::eventually([&] { return p.still_answers(); }, 5s, 100ms);
}

// Ends a probe: stops the pinger, prints its figures, and expects the unrelated client's PINGs all answered, the
// worst within `ping_bound_ms`, and the server's peak RSS under its size at start + `extra_kib`.
void expect_unharmed(Probe& p, const char* probe, std::uint64_t extra_kib, double ping_bound_ms = kPingBoundMs) {
  const double ping_ms = p.stop_pinger();
  std::printf("probe: %s: worst unrelated PING %.1f ms, peak RSS %.1f MiB (%.1f MiB at start)\n", probe, ping_ms,
              p.peak_kib() / 1024.0, p.base_kib() / 1024.0);
  EXPECT_FALSE(p.ping_failed()) << probe;
  EXPECT_LT(ping_ms, ping_bound_ms) << probe;
  EXPECT_LT(p.peak_kib(), p.base_kib() + extra_kib + kSanitizerSlackKib) << probe;
}

// A client that never reads its replies; its small receive buffer keeps the kernel from absorbing them.
std::unique_ptr<RawSocket> never_reading_client(std::uint16_t port) {
  auto s = std::make_unique<RawSocket>("127.0.0.1", port);
  int small = 4096;
  ::setsockopt(s->fd(), SOL_SOCKET, SO_RCVBUF, &small, sizeof small);
  return s;
}

TEST(Probes, WaitOnManyMissingKeysIsLinearAndDoesNotStallOthers) {
  Probe p({"--max-total-bytes", std::to_string(64u << 20)});
  ASSERT_NE(p.port(), 0);
  p.start_pinger();
  std::vector<std::string> keys;
  for (int i = 0; i < 131072; ++i) keys.push_back("missing/key/" + std::to_string(i));
  RawSocket waiter("127.0.0.1", p.port());
  const std::string req = v2_hello() + v2_keys(kV2Wait, keys);  // ~3 MB
  auto t0 = std::chrono::steady_clock::now();
  ASSERT_EQ(send_for(waiter, req, 20s), req.size());
  // The WAIT is registered (not answered): a SET of one key does not answer it, a PING on the same
  // connection afterwards cancels it (torch's client behaviour) and is answered.
  ASSERT_TRUE(waiter.send_all(v2_ping(7)));
  auto r = waiter.recv_exact(4, 20s);
  auto took = std::chrono::steady_clock::now() - t0;
  ASSERT_EQ(r.size(), 4u);
  expect_unharmed(p, "WAIT of 131072 missing keys", 96 * 1024, kBigWaitPingBoundMs);
  std::printf("probe: WAIT of 131072 keys registered and cancelled in %.0f ms\n",
              std::chrono::duration<double, std::milli>(took).count());
  EXPECT_LT(took, 15s);  // quadratic took ~28 s on an idle machine
  EXPECT_TRUE(p.still_serves());
}

TEST(Probes, MultiGetRepeatingABigKeyIsRefusedBeforeTheReplyIsBuilt) {
  Probe p({"--max-total-bytes", std::to_string(256u << 20), "--max-pending-bytes", std::to_string(64u << 20)});
  ASSERT_NE(p.port(), 0);
  const std::string big(8u << 20, 'v');
  {
    RawSocket w("127.0.0.1", p.port());
    ASSERT_TRUE(w.send_all(v2_hello() + v2_set("big", big) + v2_ping(1)));
    ASSERT_EQ(w.recv_exact(4, 20s).size(), 4u);
  }
  p.start_pinger();
  // 480 x 8 MiB = 3.9 GB asked by a 5.8 KB request: refused, the connection closed.
  RawSocket offender("127.0.0.1", p.port());
  ASSERT_TRUE(offender.send_all(v2_hello() + v2_keys(kV2MultiGet, std::vector<std::string>(480, "big"))));
  EXPECT_TRUE(closed_by_server(offender, 20s));
  // 6 x 8 MiB = 48 MiB fits the per-connection limit: served, sharing one copy of the value, even though
  // this client does not read it.
  RawSocket lazy("127.0.0.1", p.port());
  ASSERT_TRUE(lazy.send_all(v2_hello() + v2_keys(kV2MultiGet, std::vector<std::string>(6, "big"))));
  std::this_thread::sleep_for(300ms);
  // Peak: base + the value once as the request was buffered and once stored, + slack; 48 MiB more if copied.
  expect_unharmed(p, "MULTI_GET 480 x 8 MiB key", 40 * 1024);
  EXPECT_NE(p.log().find("MULTI_GET"), std::string::npos) << p.log();
  EXPECT_NE(p.log().find("--max-pending-bytes"), std::string::npos) << p.log();
  // The lazy reader gets all 6 values when it reads.
  auto got = lazy.recv_exact(6 * (8 + big.size()), 20s);
  EXPECT_EQ(got.size(), 6 * (8 + big.size()));
  EXPECT_TRUE(p.still_serves());
}

TEST(Probes, ManyNeverReadingGettersOfABigKeyShareItsBytes) {
  Probe p({"--max-total-bytes", std::to_string(48u << 20)});
  ASSERT_NE(p.port(), 0);
  const std::string big(8u << 20, 'v');
  RawSocket w("127.0.0.1", p.port());
  ASSERT_TRUE(w.send_all(v2_hello() + v2_set("big", big) + v2_ping(1)));
  ASSERT_EQ(w.recv_exact(4, 20s).size(), 4u);
  p.start_pinger();
  // 24 clients x 8 MiB = 192 MiB of replies under a 48 MiB limit if each had its own copy.
  std::vector<std::unique_ptr<RawSocket>> lazy;
  for (int i = 0; i < 24; ++i) {
    lazy.push_back(never_reading_client(p.port()));
    ASSERT_TRUE(lazy.back()->send_all(v2_hello() + v2_get("big")));
  }
  std::this_thread::sleep_for(500ms);
  // A legitimate writer still writes.
  ASSERT_TRUE(w.send_all(v2_set("other", std::string(1u << 20, 'o')) + v2_ping(2)));
  EXPECT_EQ(w.recv_exact(4, 20s).size(), 4u);
  expect_unharmed(p, "24 never-reading GETs of an 8 MiB key", 48 * 1024);
  EXPECT_TRUE(p.still_serves());
}

TEST(Probes, WatchFanOutToNeverReadingWatchersSharesTheValues) {
  Probe p({"--max-total-bytes", std::to_string(64u << 20)});
  ASSERT_NE(p.port(), 0);
  // 1.13's callback connections: legacy WATCH_KEY (opcode 7), replies 03, then never read.
  std::vector<std::unique_ptr<RawSocket>> watchers;
  for (int i = 0; i < 50; ++i) {
    watchers.push_back(never_reading_client(p.port()));
    std::string m(1, 7);
    bytes_field(m, "watched");
    ASSERT_TRUE(watchers.back()->send_all(m));
    ASSERT_EQ(watchers.back()->recv_exact(1, 10s), std::string(1, 3));
  }
  p.start_pinger();
  RawSocket w("127.0.0.1", p.port());
  ASSERT_TRUE(w.send_all(v2_hello()));
  // Three 4 MiB SETs: each event carries the old and new value to 50 watchers (50 x 3 x 8 MiB = 1.2 GB
  // if copied per watcher).
  for (char c : {'a', 'b', 'c'}) {
    ASSERT_TRUE(w.send_all(v2_set("watched", std::string(4u << 20, c)) + v2_ping(3)));
    ASSERT_EQ(w.recv_exact(4, 20s).size(), 4u);
  }
  std::this_thread::sleep_for(300ms);
  expect_unharmed(p, "WATCH fan-out, 50 never-reading watchers x 3 SETs of 4 MiB", 64 * 1024);
  EXPECT_TRUE(p.still_serves());
}

TEST(Probes, QueueElementsAndWatchRegistrationsCountAgainstTheMemoryLimit) {
  Probe p({"--max-total-bytes", std::to_string(1u << 20)});
  ASSERT_NE(p.port(), 0);
  p.start_pinger();
  // 200 000 empty queue elements (a 4 MB pipelined request stream): refused once the 1 MiB limit is
  // reached (each element costs its bookkeeping, not 0 bytes).
  RawSocket pusher("127.0.0.1", p.port());
  std::string pushes = v2_hello();
  for (int i = 0; i < 200000; ++i) {
    pushes.push_back(static_cast<char>(kV2QueuePush));
    bytes_field(pushes, "q");
    bytes_field(pushes, "");
  }
  send_for(pusher, pushes, 20s);
  EXPECT_TRUE(closed_by_server(pusher, 20s));
  // The stats say what the elements hold (they used to say 0): within the limit, and not nothing.
  ASSERT_EQ(::kill(p.pid(), SIGUSR1), 0);
  auto stats = p.child().line(10s);
  ASSERT_TRUE(stats.has_value());
  std::smatch m;
  ASSERT_TRUE(std::regex_search(*stats, m, std::regex(R"("held_bytes":(\d+))"))) << *stats;
  EXPECT_GT(std::stoull(m[1]), 512u * 1024) << *stats;
  EXPECT_LE(std::stoull(m[1]), 1u << 20) << *stats;
  // 100 000 watch registrations on one legacy connection, likewise.
  RawSocket watcher("127.0.0.1", p.port());
  std::string watches;
  for (int i = 0; i < 100000; ++i) {
    watches.push_back(7);
    bytes_field(watches, "w/" + std::to_string(i));
  }
  send_for(watcher, watches, 20s);
  EXPECT_TRUE(closed_by_server(watcher, 20s));
  expect_unharmed(p, "200k queue pushes / 100k watches under 1 MiB", 32 * 1024);
  const auto log = p.log();
  // Each offender is refused either for its element/registration or for buffering more input, whichever
  // reaches the limit first; both name the limit.
  std::size_t refusals = 0;
  for (auto pos = log.find("memory limit of 1048576 bytes"); pos != std::string::npos;
       pos = log.find("memory limit of 1048576 bytes", pos + 1))
    ++refusals;
  EXPECT_GE(refusals, 2u) << log;
  EXPECT_NE(log.find("--max-total-bytes"), std::string::npos) << log;
  // The keyspace is full of queue elements (that is the point): reads still work.
  EXPECT_TRUE(p.still_answers());
}

// ---- never a zombie; connections ----

// Out of memory inside a request handler (RLIMIT_AS makes the buffering of a 200 MB request fail):
// ctstore exits 3 with a message and its port is closed, instead of holding it and answering nothing.
TEST(Probes, FailureInTheLoopExitsNonZeroNotAZombie) {
  if (!std::filesystem::exists("/usr/bin/prlimit")) GTEST_SKIP() << "needs /usr/bin/prlimit (util-linux)";
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  GTEST_SKIP() << "RLIMIT_AS and sanitizer shadow memory do not mix";
#endif
  // ctstore's own address space (libraries, the loop thread's stack) is well under 256 MiB.
  Probe p({}, {"/usr/bin/prlimit", "--as=" + std::to_string(256u << 20), "--"});
  ASSERT_NE(p.port(), 0) << p.log();
  RawSocket offender("127.0.0.1", p.port());
  // MULTI_SET of 24 values of 8 MiB: buffered until complete, ~200 MB.
  std::string head = v2_hello();
  head.push_back(11);
  le64(head, 24);
  send_for(offender, head, 5s);
  const std::string value(8u << 20, 'x');
  for (int i = 0; i < 24; ++i) {
    std::string kv;
    bytes_field(kv, "k" + std::to_string(i));
    le64(kv, value.size());
    if (send_for(offender, kv, 5s) != kv.size() || send_for(offender, value, 10s) != value.size()) break;
  }
  auto code = p.child().wait(20s);
  ASSERT_TRUE(code.has_value()) << "ctstore is still running: " << p.log();
  EXPECT_EQ(*code, 3) << p.log();
  EXPECT_NE(p.log().find("TCPStore server loop failed"), std::string::npos) << p.log();
  EXPECT_THROW(RawSocket("127.0.0.1", p.port()), std::runtime_error);  // nothing listens any more
}

// A half-sent request is timed out; a connection blocked in WAIT is not.
TEST(Probes, HalfSentRequestTimesOutButAWaiterDoesNot) {
  Probe p({"--request-timeout", "0.5"});
  ASSERT_NE(p.port(), 0);
  RawSocket slow("127.0.0.1", p.port());
  std::string half = v2_hello() + v2_set("k", "value");
  ASSERT_TRUE(slow.send_all(half.substr(0, half.size() - 2)));
  RawSocket waiter("127.0.0.1", p.port());
  ASSERT_TRUE(waiter.send_all(v2_hello() + v2_keys(kV2Wait, {"later"})));
  EXPECT_TRUE(closed_by_server(slow, 10s));
  std::this_thread::sleep_for(1s);  // twice the timeout, with the waiter still blocked
  RawSocket setter("127.0.0.1", p.port());
  ASSERT_TRUE(setter.send_all(v2_hello() + v2_set("later", "now")));
  EXPECT_EQ(waiter.recv_exact(1, 10s), std::string(1, 0));
  EXPECT_NE(p.log().find("--request-timeout"), std::string::npos) << p.log();
}

// A request is timed from its first byte: a sender trickling one byte at a time, each well inside the
// timeout, is closed once the whole request has taken longer than the timeout (the old per-byte clock never
// fired); a client that sends a whole request is untouched.
TEST(Probes, TrickledRequestTimesOutFromItsFirstByte) {
  Probe p({"--request-timeout", "1"});
  ASSERT_NE(p.port(), 0);
  RawSocket trickler("127.0.0.1", p.port());
  const std::string frame = v2_hello() + v2_set("trickled-key", std::string(64, 'v'));
  const auto start = std::chrono::steady_clock::now();
  bool closed = false;
  // One byte every 300 ms (well under the 1 s timeout); the frame would take ~28 s to finish.
  for (std::size_t i = 0; i < frame.size() && std::chrono::steady_clock::now() - start < 15s; ++i) {
    if (!trickler.send_all(frame.substr(i, 1)) || trickler.recv_until_close(300ms).has_value()) {
      closed = true;
      break;
    }
  }
  const auto took = std::chrono::steady_clock::now() - start;
  EXPECT_TRUE(closed || closed_by_server(trickler, 5s)) << "a trickle of bytes kept the request alive";
  EXPECT_LT(took, 12s);
  RawSocket fine("127.0.0.1", p.port());
  ASSERT_TRUE(fine.send_all(v2_hello() + v2_ping(7)));
  EXPECT_EQ(fine.recv_exact(4, 10s).size(), 4u);
  EXPECT_NE(p.log().find("after its first byte"), std::string::npos) << p.log();
}

// Under a 64-descriptor limit the cap is below it (with a warning for the larger --max-connections), the
// clients beyond it are told why (protocol::kRefusalMarker in place of the PING reply) with a log line, and the
// server keeps serving.
TEST(Probes, ConnectionCapStaysBelowTheDescriptorLimit) {
  if (!std::filesystem::exists("/usr/bin/prlimit")) GTEST_SKIP() << "needs /usr/bin/prlimit (util-linux)";
  Probe p({"--max-connections", "100000"}, {"/usr/bin/prlimit", "--nofile=64:64", "--"});
  ASSERT_NE(p.port(), 0) << p.log();
  std::vector<std::unique_ptr<RawSocket>> conns;
  int refused = 0;
  for (int i = 0; i < 48; ++i) {
    auto s = std::make_unique<RawSocket>("127.0.0.1", p.port());
    const auto reply = s->send_all(v2_hello() + v2_ping(1)) ? s->recv_exact(4, 5s) : std::string();
    if (reply.size() != 4 || reply == std::string(4, '\xff')) {
      ++refused;
      continue;
    }
    conns.push_back(std::move(s));
  }
  EXPECT_EQ(conns.size(), 64u - 32u) << p.log();
  EXPECT_EQ(refused, 48 - 32);
  const auto log = p.log();
  EXPECT_NE(log.find("above what the descriptor limit allows"), std::string::npos) << log;
  EXPECT_NE(log.find("refused"), std::string::npos) << log;
  EXPECT_NE(log.find("what its descriptor limit of 64 allows"), std::string::npos) << log;
  conns.pop_back();
  EXPECT_TRUE(eventually_serves(p));
}

// A wrong handshake magic is reported as such, not as an oversized legacy SET key.
TEST(Probes, WrongFirstMagicSaysSo) {
  Probe p({});
  ASSERT_NE(p.port(), 0);
  RawSocket s("127.0.0.1", p.port());
  std::string bad(1, 0);
  le32(bad, 0xDEADBEEF);
  le32(bad, 0xFFFFFFFF);
  ASSERT_TRUE(s.send_all(bad));
  EXPECT_TRUE(closed_by_server(s, 10s));
  EXPECT_NE(p.log().find("neither torch >= 2.1's handshake"), std::string::npos) << p.log();
}

}  // namespace
}  // namespace ctrun::store
