// Server semantics the captures do not show: queues, BARRIER, LIST_KEYS, 1.13 WATCH_KEY events, waits woken
// by compare_set, the cancel race, stale 1.13 waits, waits forgotten on disconnect, owner access (clear,
// get/set/keys_local), limits closing one connection only, IPv6, and the 1.13 idle second connection.
// Raw sockets only, so these tests do not depend on our client.
#include <sys/resource.h>

#include <gtest/gtest.h>

#include <cstring>
#include <thread>

#include "store/protocol.hpp"
#include "store/server.hpp"
#include "store/store.hpp"
#include "tests/store/raw_socket.hpp"

namespace ctrun::store {
namespace {

using namespace std::chrono_literals;
using test::bytes_field;
using test::le32;
using test::le64;
using test::RawSocket;
using test::read_le64;

// v2 opcodes (torch >= 2.1).
enum V2 : char {
  kValidate = 0,
  kSet = 1,
  kCompareSet = 2,
  kGet = 3,
  kAdd = 4,
  kCheck = 5,
  kWait = 6,
  kNumKeys = 7,
  kDelete = 8,
  kAppend = 9,
  kMultiGet = 10,
  kMultiSet = 11,
  kCancel = 12,
  kPing = 13,
  kQPush = 14,
  kQPop = 15,
  kQLen = 16,
  kListKeys = 17,
  kBarrier = 18,
};

// The count of one refusal reason in the server's stats (ctstore's ctstore_refused_total{reason}).
std::uint64_t refused(const ServerStats& stats, const std::string& reason) {
  for (const auto& [name, n] : stats.refused)
    if (name == reason) return n;
  ADD_FAILURE() << "no refusal reason " << reason;
  return 0;
}

class ServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ServerOptions o;
    o.host = "127.0.0.1";
    o.limits.max_key_len = 64;
    o.limits.max_value_len = 1024;
    o.limits.max_keys_per_request = 8;
    server_ = std::make_unique<Server>(o);
    server_->start();
    ASSERT_NE(server_->port(), 0);
  }

  // A validated v2 connection.
  RawSocket v2() {
    RawSocket s("127.0.0.1", server_->port());
    std::string m(1, kValidate);
    le32(m, 0x3C85F7CE);
    EXPECT_TRUE(s.send_all(m));
    return s;
  }
  static std::string req(char op, std::initializer_list<std::string_view> fields = {}) {
    std::string r(1, op);
    for (auto f : fields) bytes_field(r, f);
    return r;
  }
  static std::string keys_req(char op, std::initializer_list<std::string_view> keys) {
    std::string r(1, op);
    le64(r, keys.size());
    for (auto k : keys) bytes_field(r, k);
    return r;
  }
  static std::string i64_req(char op, std::string_view key, std::int64_t v) {
    std::string r = req(op, {key});
    le64(r, static_cast<std::uint64_t>(v));
    return r;
  }
  // Sends a request and reads an i64 reply.
  static std::int64_t ask_i64(RawSocket& s, const std::string& r) {
    EXPECT_TRUE(s.send_all(r));
    auto b = s.recv_exact(8);
    EXPECT_EQ(b.size(), 8u);
    return b.size() == 8 ? static_cast<std::int64_t>(read_le64(b)) : -999;
  }
  static std::uint32_t ask_u32(RawSocket& s, const std::string& r) {
    EXPECT_TRUE(s.send_all(r));
    auto b = s.recv_exact(4);
    EXPECT_EQ(b.size(), 4u);
    std::uint32_t v = 0;
    std::memcpy(&v, b.data(), std::min<std::size_t>(4, b.size()));
    return v;
  }
  static std::string le64_of(std::uint64_t v) {
    std::string s;
    le64(s, v);
    return s;
  }
  static int ask_u8(RawSocket& s, const std::string& r) {
    EXPECT_TRUE(s.send_all(r));
    auto b = s.recv_exact(1);
    return b.size() == 1 ? static_cast<unsigned char>(b[0]) : -1;
  }
  static std::string read_bytes(RawSocket& s) {
    auto len = s.recv_exact(8);
    if (len.size() != 8) return "<eof>";
    return s.recv_exact(read_le64(len));
  }
  // Fence: once GETNUMKEYS is answered, everything sent before on this connection has been executed.
  static void fence(RawSocket& s) { ask_i64(s, std::string(1, kNumKeys)); }
  // A fence on one connection says nothing about another's requests: tests that need a WAIT registered
  // before they act wait (bounded) until the server holds exactly n pending waits.
  bool pending_waits_become(std::uint64_t n) {
    for (int i = 0; i < 1000; ++i) {
      if (server_->stats().pending_waits == n) return true;
      std::this_thread::sleep_for(2ms);
    }
    return server_->stats().pending_waits == n;
  }

  std::unique_ptr<Server> server_;
};

TEST_F(ServerTest, PortZeroGivesARealPortAndStatsCount) {
  auto s = v2();
  std::string ping(1, kPing);
  le32(ping, 77);
  ASSERT_TRUE(s.send_all(ping));
  EXPECT_EQ(s.recv_exact(4), std::string("\x4d\0\0\0", 4));
  EXPECT_EQ(ask_i64(s, i64_req(kAdd, "init/", 1)), 1);
  auto st = server_->stats();
  EXPECT_EQ(st.connections_open, 1u);
  EXPECT_EQ(st.keys, 1u);
  EXPECT_EQ(st.bytes, 6u);  // "init/" + "1"
  bool saw_add = false;
  for (auto& [name, n] : st.ops)
    if (name == "ADD") saw_add = n == 1;
  EXPECT_TRUE(saw_add);
}

// ctrun's extensions are announced in the PING reply to a nonce that asks (bit 22), never to one that does not.
TEST_F(ServerTest, PingAnnouncesCtrunsFeaturesOnlyWhenAsked) {
  auto s = v2();
  std::string ask(1, kPing);
  le32(ask, 77 | protocol::kPingAskFeatures);
  EXPECT_EQ(ask_u32(s, ask),
            (77 | protocol::kPingAskFeatures) | (protocol::kServerFeatures << protocol::kFeatureShift));
  std::string plain(1, kPing);
  le32(plain, 77);
  EXPECT_EQ(ask_u32(s, plain), 77u);
}

// Tagged mode (MULTIPLEX, as MuxStore and the store relay use it): every request carries its tag, every reply comes
// in a frame under that tag, and WAITs (and BARRIERs) are answered whenever they complete, holding nothing back; a
// CANCEL_WAIT under a wait's tag withdraws that wait; a request the store refuses is answered with a refused frame
// and the connection goes on.
TEST_F(ServerTest, TaggedConnectionHasManyPendingWaitsAndTheyHoldNothingBack) {
  auto s = v2();
  auto writer = v2();
  std::string multiplex(1, static_cast<char>(protocol::kMultiplexOpcode));
  le32(multiplex, protocol::kMultiplexVersion);
  EXPECT_EQ(ask_u32(s, multiplex), protocol::kMultiplexVersion);
  auto tagged = [](std::uint64_t tag, const std::string& request) { return le64_of(tag) + request; };
  auto frame = [](std::uint64_t tag, const std::string& reply) { return le64_of(tag) + std::string(1, '\0') + reply; };
  const std::string stop(1, '\0'), canceled(1, '\1');
  ASSERT_TRUE(s.send_all(tagged(10, keys_req(kWait, {"/a"}))));
  ASSERT_TRUE(s.send_all(tagged(11, keys_req(kWait, {"/b", "/c"}))));
  ASSERT_TRUE(s.send_all(tagged(12, keys_req(kWait, {"/never"}))));
  ASSERT_TRUE(pending_waits_become(3));
  ASSERT_TRUE(s.send_all(tagged(13, i64_req(kAdd, "/n", 5))));  // answered at once, the waits pending
  EXPECT_EQ(s.recv_exact(17), frame(13, le64_of(5)));
  ASSERT_TRUE(s.send_all(tagged(12, std::string(1, kCancel))));  // withdraws the wait tagged 12
  EXPECT_EQ(s.recv_exact(10), frame(12, canceled));
  ASSERT_TRUE(pending_waits_become(2));
  ASSERT_TRUE(writer.send_all(req(kSet, {"/c", "1"})));
  ASSERT_TRUE(writer.send_all(req(kSet, {"/b", "1"})));
  EXPECT_EQ(s.recv_exact(10), frame(11, stop));
  ASSERT_TRUE(writer.send_all(req(kSet, {"/never", "1"})));
  ASSERT_TRUE(writer.send_all(req(kSet, {"/a", "1"})));
  EXPECT_EQ(s.recv_exact(10), frame(10, stop));
  EXPECT_FALSE(s.wait_readable(50ms));  // nothing for the withdrawn wait
  // A WAIT on present keys is answered at once, under its tag, before the GET sent after it.
  ASSERT_TRUE(s.send_all(tagged(14, keys_req(kWait, {"/a"})) + tagged(15, req(kGet, {"/a"}))));
  EXPECT_EQ(s.recv_exact(10), frame(14, stop));
  EXPECT_EQ(s.recv_exact(18), frame(15, le64_of(1) + "1"));
  // A BARRIER is answered under its tag when the count is reached.
  ASSERT_TRUE(s.send_all(tagged(16, i64_req(kBarrier, "/bar", 2))));
  ASSERT_TRUE(pending_waits_become(1));
  ASSERT_TRUE(writer.send_all(i64_req(kBarrier, "/bar", 2)));
  EXPECT_EQ(writer.recv_exact(1), stop);
  EXPECT_EQ(s.recv_exact(10), frame(16, stop));
  // A refused request (GET of a missing key) costs its caller a refused frame, not the connection.
  ASSERT_TRUE(s.send_all(tagged(17, req(kGet, {"/missing"}))));
  EXPECT_EQ(s.recv_exact(9), le64_of(17) + std::string(1, '\1'));
  EXPECT_NE(read_bytes(s).find("/missing"), std::string::npos);
  ASSERT_TRUE(s.send_all(tagged(18, std::string(1, kNumKeys))));
  EXPECT_EQ(s.recv_exact(9), le64_of(18) + stop);
  EXPECT_EQ(s.recv_exact(8).size(), 8u);
  // The connection's waits go with it.
  ASSERT_TRUE(s.send_all(tagged(19, keys_req(kWait, {"/gone"}))));
  ASSERT_TRUE(pending_waits_become(1));
  s.close();
  EXPECT_TRUE(pending_waits_become(0));
}

// ON_SILENCE: a connection that sends nothing for the timeout gets its value appended (once); speaking again appends
// the other value and re-arms; a close after a silence that fired appends no ON_CLOSE to the same key.
TEST_F(ServerTest, OnSilenceReportsAQuietConnectionOnceAndItsReturn) {
  auto quiet = v2();
  auto reader = v2();
  auto on_silence = [](std::string_view key, std::string_view silent, std::string_view back, std::int64_t ms) {
    std::string r(1, static_cast<char>(protocol::kOnSilenceOpcode));
    bytes_field(r, key);
    bytes_field(r, silent);
    bytes_field(r, back);
    le64(r, static_cast<std::uint64_t>(ms));
    return r;
  };
  std::string on_close(1, static_cast<char>(protocol::kOnCloseOpcode));
  bytes_field(on_close, "/lost");
  bytes_field(on_close, "-1,");
  le64(on_close, 1);
  EXPECT_EQ(ask_i64(quiet, on_close), 1);
  EXPECT_EQ(ask_i64(quiet, on_silence("/lost", "!1,", "+1,", 300)), 1);
  ASSERT_TRUE(reader.send_all(keys_req(kWait, {"/lost"})));
  EXPECT_EQ(reader.recv_exact(1, 10s), std::string(1, '\0'));  // woken by the silence
  ASSERT_TRUE(reader.send_all(req(kGet, {"/lost"})));
  EXPECT_EQ(read_bytes(reader), "!1,");
  std::this_thread::sleep_for(700ms);  // still quiet: once, not again
  ASSERT_TRUE(reader.send_all(req(kGet, {"/lost"})));
  EXPECT_EQ(read_bytes(reader), "!1,");
  fence(quiet);  // speaks: back
  ASSERT_TRUE(reader.send_all(req(kGet, {"/lost"})));
  EXPECT_EQ(read_bytes(reader), "!1,+1,");
  // Quiet again, then closed: the silence says it, the close adds nothing.
  for (int i = 0; i < 100; ++i) {
    ASSERT_TRUE(reader.send_all(req(kGet, {"/lost"})));
    if (read_bytes(reader) == "!1,+1,!1,") break;
    std::this_thread::sleep_for(50ms);
  }
  quiet.close();
  ASSERT_TRUE(pending_waits_become(0));
  std::this_thread::sleep_for(100ms);
  ASSERT_TRUE(reader.send_all(req(kGet, {"/lost"})));
  EXPECT_EQ(read_bytes(reader), "!1,+1,!1,");
  // A cancelled registration never fires; a closing connection that was not silent still reports its close.
  auto other = v2();
  EXPECT_EQ(ask_i64(other, on_close), 1);
  EXPECT_EQ(ask_i64(other, on_silence("/lost", "!2,", "+2,", 200)), 1);
  EXPECT_EQ(ask_i64(other, on_silence("/lost", "", "", 0)), 0);
  std::this_thread::sleep_for(600ms);
  other.close();
  for (int i = 0; i < 100; ++i) {
    ASSERT_TRUE(reader.send_all(req(kGet, {"/lost"})));
    if (read_bytes(reader) == "!1,+1,!1,-1,") break;
    std::this_thread::sleep_for(20ms);
  }
  ASSERT_TRUE(reader.send_all(req(kGet, {"/lost"})));
  EXPECT_EQ(read_bytes(reader), "!1,+1,!1,-1,");
}

TEST_F(ServerTest, CompareSetCreatingAKeyWakesWaiters) {
  auto waiter = v2();
  auto writer = v2();
  ASSERT_TRUE(waiter.send_all(keys_req(kWait, {"/x"})));
  ASSERT_TRUE(pending_waits_become(1));
  EXPECT_FALSE(waiter.wait_readable(50ms));
  ASSERT_TRUE(writer.send_all(req(kCompareSet, {"/x", "", "v"})));
  EXPECT_EQ(read_bytes(writer), "v");
  EXPECT_EQ(waiter.recv_exact(1), std::string(1, '\0'));
}

TEST_F(ServerTest, MultiKeyWaitGetsOneReplyAfterAllKeys) {
  auto waiter = v2();
  auto writer = v2();
  ASSERT_TRUE(waiter.send_all(keys_req(kWait, {"/a", "/b", "/a"})));
  ASSERT_TRUE(pending_waits_become(1));
  ASSERT_TRUE(writer.send_all(req(kSet, {"/a", "1"})));
  fence(writer);
  EXPECT_FALSE(waiter.wait_readable(30ms));
  EXPECT_EQ(server_->stats().pending_waits, 1u);
  ASSERT_TRUE(writer.send_all(req(kAppend, {"/b", "2"})));
  fence(writer);
  EXPECT_EQ(waiter.recv_exact(1), std::string(1, '\0'));
  EXPECT_FALSE(waiter.wait_readable(30ms));  // exactly one reply
  EXPECT_EQ(server_->stats().pending_waits, 0u);
}

TEST_F(ServerTest, CancelRaceGivesStopWaitingThenCanceled) {
  auto waiter = v2();
  auto writer = v2();
  ASSERT_TRUE(waiter.send_all(keys_req(kWait, {"/late"})));
  ASSERT_TRUE(pending_waits_become(1));
  ASSERT_TRUE(writer.send_all(req(kSet, {"/late", "x"})));
  fence(writer);
  // The client "timed out" just before the key appeared: it reads 00 then 01.
  ASSERT_TRUE(waiter.send_all(std::string(1, kCancel)));
  EXPECT_EQ(waiter.recv_exact(2), std::string("\0\1", 2));
  // Plain cancel of a pending wait: only 01, and the registration is gone.
  ASSERT_TRUE(waiter.send_all(keys_req(kWait, {"/never"})));
  ASSERT_TRUE(pending_waits_become(1));
  EXPECT_EQ(ask_u8(waiter, std::string(1, kCancel)), 1);
  EXPECT_EQ(server_->stats().pending_waits, 0u);
  ASSERT_TRUE(writer.send_all(req(kSet, {"/never", "x"})));
  fence(writer);
  EXPECT_FALSE(waiter.wait_readable(30ms));
}

TEST_F(ServerTest, DisconnectMidWaitLeavesNoPendingWait) {
  {
    auto waiter = v2();
    ASSERT_TRUE(waiter.send_all(keys_req(kWait, {"/gone", "/gone2"})));
    ASSERT_TRUE(pending_waits_become(1));
  }
  EXPECT_TRUE(pending_waits_become(0));
  // Setting the key later must not touch the dead connection.
  auto w = v2();
  ASSERT_TRUE(w.send_all(req(kSet, {"/gone", "x"})));
  fence(w);
  EXPECT_EQ(server_->stats().connections_open, 1u);
}

TEST_F(ServerTest, Legacy113TimedOutWaitIsDroppedByTheNextRequest) {
  // torch 1.13 times out a wait silently and sends its next request on the same connection. We drop the
  // stale registration then, so a later SET of that key sends no stray 00 to desynchronise the client.
  RawSocket legacy("127.0.0.1", server_->port());
  std::string wait(1, 5);  // legacy WAIT
  le64(wait, 1);
  bytes_field(wait, "/never");
  ASSERT_TRUE(legacy.send_all(wait));
  std::string numkeys(1, 6);
  EXPECT_EQ(ask_i64(legacy, numkeys), 0);
  EXPECT_EQ(server_->stats().pending_waits, 0u);
  auto w = v2();
  ASSERT_TRUE(w.send_all(req(kSet, {"/never", "x"})));
  fence(w);
  EXPECT_FALSE(legacy.wait_readable(30ms));
}

TEST_F(ServerTest, QueuesCountAsPresentAndWakeOneWaiter) {
  auto a = v2();
  auto b = v2();
  auto c = v2();
  EXPECT_EQ(ask_u8(a, keys_req(kCheck, {"/q"})), 1);
  ASSERT_TRUE(b.send_all(keys_req(kWait, {"/q"})));
  ASSERT_TRUE(c.send_all(keys_req(kWait, {"/q"})));
  ASSERT_TRUE(pending_waits_become(2));
  ASSERT_TRUE(a.send_all(req(kQPush, {"/q", "one"})));
  fence(a);
  // Exactly one of the two waiters is woken by one element.
  bool b_woke = b.wait_readable(200ms);
  bool c_woke = c.wait_readable(50ms);
  EXPECT_NE(b_woke, c_woke);
  EXPECT_EQ(ask_u8(a, keys_req(kCheck, {"/q"})), 0);
  ASSERT_TRUE(a.send_all(req(kQPush, {"/q", "two"})));
  EXPECT_EQ(ask_i64(a, req(kQLen, {"/q"})), 2);
  EXPECT_EQ(ask_i64(a, req(kQPop, {"/q"})), 2);
  EXPECT_EQ(read_bytes(a), "one");
  EXPECT_EQ(ask_i64(a, req(kQPop, {"/q"})), 1);
  EXPECT_EQ(read_bytes(a), "two");
  EXPECT_EQ(ask_i64(a, req(kQPop, {"/q"})), 0);  // empty: no value follows
  EXPECT_EQ(ask_i64(a, req(kQLen, {"/q"})), 0);
  EXPECT_EQ(ask_u8(a, keys_req(kCheck, {"/q"})), 1);
  EXPECT_EQ(ask_i64(a, std::string(1, kNumKeys)), 0);  // queues are not keys
}

TEST_F(ServerTest, BarrierRepliesWhenTheCountIsReached) {
  auto a = v2();
  auto b = v2();
  auto c = v2();
  ASSERT_TRUE(a.send_all(i64_req(kBarrier, "/bar", 3)));
  ASSERT_TRUE(b.send_all(i64_req(kBarrier, "/bar", 3)));
  ASSERT_TRUE(pending_waits_become(2));
  EXPECT_FALSE(a.wait_readable(30ms));
  EXPECT_FALSE(b.wait_readable(0ms));
  EXPECT_EQ(ask_u8(c, i64_req(kBarrier, "/bar", 3)), 0);
  EXPECT_EQ(a.recv_exact(1), std::string(1, '\0'));
  EXPECT_EQ(b.recv_exact(1), std::string(1, '\0'));
  EXPECT_EQ(server_->get_local("/bar"), std::optional<std::string>("3"));
  EXPECT_EQ(server_->stats().pending_waits, 0u);
  // Cancellable like WAIT.
  ASSERT_TRUE(a.send_all(i64_req(kBarrier, "/bar2", 2)));
  EXPECT_EQ(ask_u8(a, std::string(1, kCancel)), 1);
  EXPECT_EQ(server_->stats().pending_waits, 0u);
}

TEST_F(ServerTest, ListKeysAndDelete) {
  auto a = v2();
  ASSERT_TRUE(a.send_all(req(kSet, {"/k1", "v"})));
  ASSERT_TRUE(a.send_all(req(kSet, {"init/", "1"})));
  EXPECT_EQ(ask_i64(a, std::string(1, kListKeys)), 2);
  std::vector<std::string> keys{read_bytes(a), read_bytes(a)};
  std::sort(keys.begin(), keys.end());
  EXPECT_EQ(keys, (std::vector<std::string>{"/k1", "init/"}));
  EXPECT_EQ(ask_i64(a, req(kDelete, {"/k1"})), 1);
  EXPECT_EQ(ask_i64(a, req(kDelete, {"/k1"})), 0);
  EXPECT_EQ(server_->keys_local(), (std::vector<std::string>{"init/"}));
}

TEST_F(ServerTest, Legacy113WatchKeyRegistersAndReceivesEvents) {
  // 1.13's callback connection: WATCH_KEY (7) -> u8 3, then events u8 type, key, old value, new value.
  RawSocket watcher("127.0.0.1", server_->port());
  std::string watch(1, 7);
  bytes_field(watch, "/w");
  ASSERT_TRUE(watcher.send_all(watch));
  EXPECT_EQ(watcher.recv_exact(1), std::string(1, '\3'));
  auto a = v2();
  ASSERT_TRUE(a.send_all(req(kSet, {"/w", "v1"})));
  ASSERT_TRUE(a.send_all(req(kSet, {"/w", "v2"})));
  EXPECT_EQ(ask_i64(a, req(kDelete, {"/w"})), 1);
  std::string ev;
  auto event = [](char type, std::string_view old_v, std::string_view new_v) {
    std::string e(1, type);
    bytes_field(e, "/w");
    bytes_field(e, old_v);
    bytes_field(e, new_v);
    return e;
  };
  std::string want = event(1, "", "v1") + event(0, "v1", "v2") + event(2, "v2", "");
  EXPECT_EQ(watcher.recv_exact(want.size()), want);
}

TEST_F(ServerTest, IdleSecondConnectionOf113IsFine) {
  RawSocket main_conn("127.0.0.1", server_->port());
  RawSocket callback("127.0.0.1", server_->port());  // never carries a byte
  std::string add(1, 3);
  bytes_field(add, "init/");
  le64(add, 1);
  EXPECT_EQ(ask_i64(main_conn, add), 1);
  EXPECT_EQ(server_->stats().connections_open, 2u);
  EXPECT_FALSE(callback.wait_readable(20ms));
}

TEST_F(ServerTest, ViolationsCloseOnlyThatConnection) {
  auto good = v2();
  ASSERT_TRUE(good.send_all(req(kSet, {"/k", "v"})));
  const std::vector<std::string> bad = {
      std::string("\x00\xce\xf7\x85\x3c\x63", 6),  // v2, unknown opcode 99
      [] {
        std::string s("\x00\xce\xf7\x85\x3c\x01", 6);  // v2 SET with a key over the 64-byte limit
        le64(s, 65);
        return s;
      }(),
      [] {
        std::string s(1, '\x00');  // VALIDATE with a wrong magic after a right one
        le32(s, 0x3C85F7CE);
        s.push_back('\x00');
        le32(s, 0xdeadbeef);
        return s;
      }(),
      [] {
        std::string s(1, '\x02');  // legacy GET with a 2^64-1 length
        le64(s, ~0ull);
        return s;
      }(),
      [] {
        std::string s("\x00\xce\xf7\x85\x3c\x05", 6);  // CHECK with 9 keys (limit 8)
        le64(s, 9);
        return s;
      }(),
      [] {
        std::string s("\x00\xce\xf7\x85\x3c\x01", 6);  // value over 1024
        bytes_field(s, "/k");
        le64(s, 1025);
        return s;
      }(),
  };
  for (const auto& b : bad) {
    RawSocket s("127.0.0.1", server_->port());
    ASSERT_TRUE(s.send_all(b));
    auto rest = s.recv_until_close(5s);
    ASSERT_TRUE(rest.has_value()) << "server did not close";
    EXPECT_TRUE(rest->empty());
  }
  ASSERT_TRUE(good.send_all(req(kGet, {"/k"})));
  EXPECT_EQ(read_bytes(good), "v");
  EXPECT_GE(server_->stats().connections_rejected, bad.size());
  // Undecodable bytes are bad requests; the decoded VALIDATE with a wrong magic is an invalid command.
  EXPECT_EQ(refused(server_->stats(), "bad_request"), bad.size() - 1);
  EXPECT_EQ(refused(server_->stats(), "invalid_command"), 1u);
}

TEST_F(ServerTest, StatsCountBytesAndRefusalsByReason) {
  auto a = v2();
  ASSERT_TRUE(a.send_all(req(kSet, {"/k", std::string(500, 'v')})));
  ASSERT_TRUE(a.send_all(req(kGet, {"/k"})));
  EXPECT_EQ(read_bytes(a), std::string(500, 'v'));
  auto s = server_->stats();
  EXPECT_GE(s.bytes_in, 500u);   // the SET's value
  EXPECT_GE(s.bytes_out, 500u);  // the GET's reply
  // A GET of a missing key fails the protocol's way (the connection is closed): an invalid command.
  auto b = v2();
  ASSERT_TRUE(b.send_all(req(kGet, {"/missing"})));
  ASSERT_TRUE(b.recv_until_close(5s).has_value());
  s = server_->stats();
  EXPECT_EQ(refused(s, "invalid_command"), 1u);
  EXPECT_EQ(refused(s, "bad_request"), 0u);
  EXPECT_EQ(s.connections_rejected, 1u);
}

TEST_F(ServerTest, OwnerAccessAndClear) {
  auto a = v2();
  ASSERT_TRUE(a.send_all(req(kSet, {"/k", "v"})));
  fence(a);
  EXPECT_EQ(server_->get_local("/k"), std::optional<std::string>("v"));
  EXPECT_EQ(server_->get_local("/nope"), std::nullopt);
  // set_local wakes a remote waiter.
  auto w = v2();
  ASSERT_TRUE(w.send_all(keys_req(kWait, {"/owner"})));
  ASSERT_TRUE(pending_waits_become(1));
  server_->set_local("/owner", "x");
  EXPECT_EQ(w.recv_exact(1), std::string(1, '\0'));
  // clear() drops keys, queues and pending waits; connections stay usable.
  ASSERT_TRUE(w.send_all(keys_req(kWait, {"/after"})));
  ASSERT_TRUE(a.send_all(req(kQPush, {"/q", "e"})));
  fence(a);
  ASSERT_TRUE(pending_waits_become(1));
  server_->clear();
  auto st = server_->stats();
  EXPECT_EQ(st.keys, 0u);
  EXPECT_EQ(st.bytes, 0u);
  EXPECT_EQ(st.pending_waits, 0u);
  EXPECT_EQ(ask_i64(a, req(kQLen, {"/q"})), 0);
  ASSERT_TRUE(a.send_all(req(kSet, {"/after", "x"})));
  fence(a);
  EXPECT_FALSE(w.wait_readable(30ms));  // the cleared wait is not answered
  EXPECT_EQ(ask_u8(w, std::string(1, kCancel)), 1);
  EXPECT_EQ(ask_u8(w, keys_req(kCheck, {"/after"})), 0);
}

TEST(ServerBind, Ipv6LoopbackAndDualStack) {
  for (const char* host : {"::1", "::"}) {
    ServerOptions o;
    o.host = host;
    Server s(o);
    try {
      s.start();
    } catch (const StoreError& e) {
      GTEST_SKIP() << "IPv6 unavailable here: " << e.what();
    }
    RawSocket c("::1", s.port());
    std::string add(1, 3);
    bytes_field(add, "init/");
    le64(add, 1);
    ASSERT_TRUE(c.send_all(add));
    EXPECT_EQ(read_le64(c.recv_exact(8)), 1u);
    if (std::string(host) == "::") {
      RawSocket c4("127.0.0.1", s.port());  // dual stack serves IPv4 too
      ASSERT_TRUE(c4.send_all(add));
      EXPECT_EQ(read_le64(c4.recv_exact(8)), 2u);
    }
  }
}

TEST(ServerBind, HostNamesAndBracketedIpv6) {
  ServerOptions o;
  o.host = "localhost";  // resolved; IPv4 preferred
  Server s(o);
  s.start();
  RawSocket c("127.0.0.1", s.port());
  std::string numkeys(1, 6);
  ASSERT_TRUE(c.send_all(numkeys));
  EXPECT_EQ(c.recv_exact(8).size(), 8u);
  ServerOptions o6;
  o6.host = "[::1]";
  Server s6(o6);
  try {
    s6.start();
  } catch (const StoreError& e) {
    GTEST_SKIP() << "IPv6 unavailable here: " << e.what();
  }
  RawSocket c6("::1", s6.port());
  ASSERT_TRUE(c6.send_all(numkeys));
  EXPECT_EQ(c6.recv_exact(8).size(), 8u);
}

TEST(ServerBind, BusyPortIsAClearError) {
  ServerOptions o;
  o.host = "127.0.0.1";
  Server first(o);
  first.start();
  o.port = first.port();
  o.reuse_address = false;
  Server second(o);
  try {
    second.start();
    FAIL() << "second bind succeeded";
  } catch (const StoreError& e) {
    EXPECT_NE(std::string(e.what()).find(std::to_string(o.port)), std::string::npos) << e.what();
  }
}

TEST(ServerLimits, MaxConnectionsRefusesExtraConnections) {
  ServerOptions o;
  o.host = "127.0.0.1";
  o.max_connections = 2;
  Server s(o);
  s.start();
  RawSocket a("127.0.0.1", s.port()), b("127.0.0.1", s.port());
  std::string numkeys(1, 6);
  ASSERT_TRUE(a.send_all(numkeys));
  ASSERT_EQ(a.recv_exact(8).size(), 8u);
  ASSERT_TRUE(b.send_all(numkeys));
  ASSERT_EQ(b.recv_exact(8).size(), 8u);
  RawSocket c("127.0.0.1", s.port());
  auto rest = c.recv_until_close(5s);
  ASSERT_TRUE(rest.has_value());
  // Told why, in place of its first reply (protocol::kRefusalMarker + the reason), then closed: never left hanging.
  ASSERT_GE(rest->size(), 12u);
  EXPECT_EQ(rest->substr(0, 4), std::string(4, '\xff'));
  EXPECT_EQ(read_le64(rest->substr(4, 8)), rest->size() - 12);
  EXPECT_NE(rest->find("it holds its maximum of 2 connections (--max-connections)"), std::string::npos) << *rest;
  EXPECT_EQ(s.stats().connections_rejected, 1u);
  EXPECT_EQ(refused(s.stats(), "connection_cap"), 1u);
  ASSERT_TRUE(a.send_all(numkeys));
  EXPECT_EQ(a.recv_exact(8).size(), 8u);
}

// The connection cap follows the descriptor limit, which the server raised to the hard limit at start.
TEST(ServerLimits, TheCapIsTheHardDescriptorLimitLessAReserve) {
  Server s(ServerOptions{.host = "127.0.0.1"});
  s.start();
  rlimit rl{};
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &rl), 0);
  EXPECT_EQ(rl.rlim_cur, rl.rlim_max);
  if (rl.rlim_cur != RLIM_INFINITY) {
    EXPECT_EQ(s.max_connections(), rl.rlim_cur - 32);
  }
}

TEST(ServerLimits, MemoryLimitRejectsTheWriterOnly) {
  ServerOptions o;
  o.host = "127.0.0.1";
  o.max_total_bytes = 64 * 1024;
  Server s(o);
  s.start();
  RawSocket ok("127.0.0.1", s.port()), hog("127.0.0.1", s.port());
  std::string set(1, 0);  // legacy SET
  bytes_field(set, "/small");
  bytes_field(set, "v");
  ASSERT_TRUE(ok.send_all(set));
  std::string big(1, 0);
  bytes_field(big, "/big");
  bytes_field(big, std::string(100 * 1024, 'x'));
  hog.send_all(big);
  auto rest = hog.recv_until_close(5s);
  ASSERT_TRUE(rest.has_value()) << "the writer over the limit was not closed";
  std::string get(1, 2);
  bytes_field(get, "/small");
  ASSERT_TRUE(ok.send_all(get));
  EXPECT_EQ(ok.recv_exact(9), std::string("\1\0\0\0\0\0\0\0v", 9));
  EXPECT_EQ(s.get_local("/big"), std::nullopt);
  EXPECT_EQ(refused(s.stats(), "memory_limit"), 1u);
}

TEST(ServerLifecycle, StopIsIdempotentAndClosesClients) {
  ServerOptions o;
  o.host = "127.0.0.1";
  auto s = std::make_unique<Server>(o);
  s->start();
  RawSocket c("127.0.0.1", s->port());
  std::string numkeys(1, 6);
  ASSERT_TRUE(c.send_all(numkeys));
  ASSERT_EQ(c.recv_exact(8).size(), 8u);
  s->stop();
  s->stop();
  EXPECT_TRUE(c.recv_until_close(5s).has_value());
  // Started again after a stop, it serves again (the keyspace is kept; clear() is the owner's call).
  s->start();
  RawSocket again("127.0.0.1", s->port());
  ASSERT_TRUE(again.send_all(numkeys));
  EXPECT_EQ(again.recv_exact(8).size(), 8u);
  s.reset();
}

// Big WAITs and MULTI_SETs (more than detail::kSliceKeys keys) run in slices between other clients' work;
// their semantics must be those of the one-shot path.
class SlicedServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    server_ = std::make_unique<Server>(ServerOptions{.host = "127.0.0.1"});
    server_->start();
  }
  RawSocket v2() {
    RawSocket s("127.0.0.1", server_->port());
    std::string m(1, kValidate);
    le32(m, 0x3C85F7CE);
    EXPECT_TRUE(s.send_all(m));
    return s;
  }
  static std::string many(char op, int n, const std::string& prefix, bool with_values) {
    std::string r(1, op);
    le64(r, static_cast<std::uint64_t>(n));
    for (int i = 0; i < n; ++i) {
      bytes_field(r, prefix + std::to_string(i));
      if (with_values) bytes_field(r, "v");
    }
    return r;
  }
  static std::string one(char op, const std::string& key, const std::string& value) {
    std::string r(1, op);
    bytes_field(r, key);
    bytes_field(r, value);
    return r;
  }
  static std::string ping(std::uint32_t n) {
    std::string r(1, kPing);
    le32(r, n);
    return r;
  }
  std::unique_ptr<Server> server_;
};

TEST_F(SlicedServerTest, BigWaitAnsweredOnceWhenTheLastKeyAppears) {
  constexpr int kKeys = 10000;
  auto setter = v2();
  // All but the last key exist; the waiter then waits for that one only.
  ASSERT_TRUE(setter.send_all(many(kMultiSet, kKeys - 1, "k", true) + ping(1)));
  ASSERT_EQ(setter.recv_exact(4).size(), 4u);
  EXPECT_EQ(server_->stats().keys, static_cast<std::uint64_t>(kKeys - 1));
  auto waiter = v2();
  ASSERT_TRUE(waiter.send_all(many(kWait, kKeys, "k", false)));
  std::this_thread::sleep_for(100ms);
  EXPECT_TRUE(waiter.recv_exact(1, 200ms).empty()) << "answered before the last key appeared";
  ASSERT_TRUE(setter.send_all(one(kSet, "k" + std::to_string(kKeys - 1), "v")));
  EXPECT_EQ(waiter.recv_exact(1), std::string(1, 0));
  EXPECT_TRUE(waiter.recv_exact(1, 200ms).empty()) << "a second reply";
  EXPECT_EQ(server_->stats().pending_waits, 0u);
}

TEST_F(SlicedServerTest, BigWaitOnPresentKeysAnsweredAtOnceAndLaterRequestsFollowInOrder) {
  constexpr int kKeys = 9000;
  auto s = v2();
  ASSERT_TRUE(s.send_all(many(kMultiSet, kKeys, "p", true) + many(kWait, kKeys, "p", false) + ping(5)));
  auto r = s.recv_exact(5);
  ASSERT_EQ(r.size(), 5u);
  EXPECT_EQ(r[0], 0);                                            // the WAIT's STOP_WAITING
  EXPECT_EQ(read_le64(r.substr(1) + std::string(4, '\0')), 5u);  // then the PING's echo
}

TEST_F(SlicedServerTest, CancelledBigWaitLeavesNoStrayReplyAndAFreshWaitCountsOnce) {
  constexpr int kKeys = 10000;
  auto waiter = v2();
  ASSERT_TRUE(waiter.send_all(many(kWait, kKeys, "m", false)));
  std::string cancel(1, kCancel);
  ASSERT_TRUE(waiter.send_all(cancel));
  EXPECT_EQ(waiter.recv_exact(1), std::string(1, 1));  // WAIT_CANCELED
  // A new wait on two of the same keys: the big wait's stale entries must not count for it.
  std::string w2(1, kWait);
  le64(w2, 2);
  bytes_field(w2, "m1");
  bytes_field(w2, "m2");
  ASSERT_TRUE(waiter.send_all(w2));
  auto setter = v2();
  ASSERT_TRUE(setter.send_all(one(kSet, "m1", "v") + ping(1)));
  ASSERT_EQ(setter.recv_exact(4).size(), 4u);
  EXPECT_TRUE(waiter.recv_exact(1, 200ms).empty()) << "woken by one of its two keys";
  ASSERT_TRUE(setter.send_all(one(kSet, "m2", "v")));
  EXPECT_EQ(waiter.recv_exact(1), std::string(1, 0));
  EXPECT_TRUE(waiter.recv_exact(1, 200ms).empty());
  // The stale entries are cleaned up in the background: nothing is left pending.
  EXPECT_EQ(server_->stats().pending_waits, 0u);
}

TEST_F(SlicedServerTest, BigCheckAndMultiGetGiveTheOneShotAnswers) {
  constexpr int kKeys = 9000;  // > detail::kSliceKeys: looked at in slices
  auto s = v2();
  ASSERT_TRUE(s.send_all(many(kMultiSet, kKeys, "g", true) + ping(1)));
  ASSERT_EQ(s.recv_exact(4).size(), 4u);
  // All present: READY (0); one missing at the end: NOT_READY (1); then the PING, in order.
  std::string missing_last = many(kCheck, kKeys, "g", false);
  bytes_field(missing_last, "absent");
  missing_last.replace(1, 8, [&] {
    std::string c;
    le64(c, kKeys + 1);
    return c;
  }());
  ASSERT_TRUE(s.send_all(many(kCheck, kKeys, "g", false) + missing_last + ping(2)));
  auto r = s.recv_exact(6);
  ASSERT_EQ(r.size(), 6u);
  EXPECT_EQ(r[0], 0);
  EXPECT_EQ(r[1], 1);
  // MULTI_GET of all: one "v" per key (u64 length 1 + 'v'), then the PING.
  ASSERT_TRUE(s.send_all(many(kMultiGet, kKeys, "g", false) + ping(3)));
  auto values = s.recv_exact(static_cast<std::size_t>(kKeys) * 9 + 4);
  ASSERT_EQ(values.size(), static_cast<std::size_t>(kKeys) * 9 + 4);
  for (int i = 0; i < kKeys; ++i) ASSERT_EQ(values.substr(static_cast<std::size_t>(i) * 9 + 8, 1), "v") << i;
  // A missing key in a later slice: the values before it, then the close (as torch's legacy servers).
  std::string with_gap = many(kMultiGet, kKeys, "g", false);
  with_gap.replace(1, 8, [&] {
    std::string c;
    le64(c, kKeys + 1);
    return c;
  }());
  bytes_field(with_gap, "absent");
  ASSERT_TRUE(s.send_all(with_gap));
  auto before_close = s.recv_until_close(10s);
  ASSERT_TRUE(before_close.has_value()) << "the server did not close";
  EXPECT_EQ(before_close->size(), static_cast<std::size_t>(kKeys) * 9);
}

}  // namespace
}  // namespace ctrun::store
