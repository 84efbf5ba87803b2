// The store relay's rules (store/relay_core.hpp) against a fake upstream and fake client connections: what goes
// upstream, when, and what each client is answered.
#include "store/relay_core.hpp"

#include <gtest/gtest.h>

#include <map>
#include <set>
#include <string>
#include <vector>

namespace ctrun::store::detail {
namespace {

using protocol::Command;
using protocol::Reply;
using protocol::Request;

class FakePort final : public RelayPort {
 public:
  struct Sent {
    std::uint64_t tag;
    Request request;
  };
  void send(std::uint64_t tag, const Request& request) override { sent.push_back({tag, request}); }
  bool congested() const override { return congested_now; }
  void want_flush() override { ++flushes_wanted; }
  ReplyBuffer* output(ConnId client) override { return gone.count(client) ? nullptr : &outputs[client]; }
  void resume(ConnId client) override { resumed.push_back(client); }
  void fail(ConnId client, Refusal kind, const std::string& reason) override {
    failed[client] = reason;
    kinds[client] = kind;
  }

  // What client has been sent so far, as bytes (and drained).
  std::string take(ConnId client) {
    auto& out = outputs[client];
    std::string bytes;
    iovec iov[64];
    const int n = out.gather(iov, 64);
    for (int i = 0; i < n; ++i) bytes.append(static_cast<const char*>(iov[i].iov_base), iov[i].iov_len);
    out.consume(bytes.size());
    return bytes;
  }

  std::vector<Sent> sent;
  std::map<ConnId, ReplyBuffer> outputs;
  std::vector<ConnId> resumed;
  std::map<ConnId, std::string> failed;
  std::map<ConnId, Refusal> kinds;
  std::set<ConnId> gone;
  bool congested_now = false;
  int flushes_wanted = 0;
};

Request get(const std::string& key) { return {.command = Command::kGet, .keys = {key}}; }
Request add(const std::string& key, std::int64_t delta) {
  return {.command = Command::kAdd, .keys = {key}, .integer = delta};
}
Request wait(std::vector<std::string> keys) { return {.command = Command::kWait, .keys = std::move(keys)}; }
Request set(const std::string& key, const std::string& value) {
  return {.command = Command::kSet, .keys = {key}, .values = {value}};
}

std::string i64(std::int64_t v) {
  std::string s;
  protocol::put_i64(s, v);
  return s;
}
std::string bytes_of(const std::string& v) {
  std::string s;
  protocol::put_bytes(s, v);
  return s;
}
const std::string kStop(1, '\0');      // STOP_WAITING
const std::string kCanceled(1, '\1');  // WAIT_CANCELED

class RelayCoreTest : public ::testing::Test {
 protected:
  FakePort port;
  RelayCore core{port, 1ull << 30};

  Reply value_reply(const std::string& v) {
    Reply r;
    r.values = {v};
    return r;
  }
  Reply integer_reply(std::int64_t v) {
    Reply r;
    r.integer = v;
    return r;
  }
  Reply u8_reply(std::uint8_t v) {
    Reply r;
    r.u8 = v;
    return r;
  }
};

TEST_F(RelayCoreTest, IdenticalGetsBeforeAFlushGoUpOnceAndEveryClientGetsTheValue) {
  for (ConnId c : {1, 2, 3}) EXPECT_TRUE(core.execute(c, get("/k")).hold);
  EXPECT_TRUE(port.sent.empty()) << "nothing goes up before the round's flush";
  core.flush_batches();
  ASSERT_EQ(port.sent.size(), 1u);
  EXPECT_EQ(port.sent[0].request.command, Command::kGet);
  ASSERT_TRUE(core.on_reply(port.sent[0].tag, value_reply("v")));
  for (ConnId c : {1, 2, 3}) EXPECT_EQ(port.take(c), bytes_of("v")) << c;
  EXPECT_EQ(port.resumed, (std::vector<ConnId>{1, 2, 3}));
  EXPECT_EQ(core.counters().client_requests, 3u);
  EXPECT_EQ(core.counters().upstream_requests, 1u);
  EXPECT_EQ(core.counters().combined, 2u);
  EXPECT_EQ(core.in_flight(), 0u);
}

TEST_F(RelayCoreTest, AReadArrivingWhileOneIsInFlightWaitsForItAndGoesWithTheOthersAfter) {
  core.execute(1, get("/k"));
  core.flush_batches();
  ASSERT_EQ(port.sent.size(), 1u);
  // Arrive while the first GET is in flight: its answer may predate them, so they do not take it.
  core.execute(2, get("/k"));
  core.execute(3, get("/k"));
  core.flush_batches();
  EXPECT_EQ(port.sent.size(), 1u) << "held until the GET in flight returns";
  core.on_reply(port.sent[0].tag, value_reply("old"));
  EXPECT_EQ(port.take(1), bytes_of("old"));
  EXPECT_EQ(port.take(2), "");
  core.flush_batches();
  ASSERT_EQ(port.sent.size(), 2u) << "then one GET for both";
  core.on_reply(port.sent[1].tag, value_reply("new"));
  EXPECT_EQ(port.take(2), bytes_of("new"));
  EXPECT_EQ(port.take(3), bytes_of("new"));
}

TEST_F(RelayCoreTest, DifferentKeysAndDifferentReadsAreNotCombined) {
  core.execute(1, get("/a"));
  core.execute(2, get("/b"));
  core.execute(3, {.command = Command::kCheck, .keys = {"/a"}});
  core.execute(4, {.command = Command::kMultiGet, .keys = {"/a", "/b"}});
  core.execute(5, {.command = Command::kMultiGet, .keys = {"/b", "/a"}});
  core.flush_batches();
  EXPECT_EQ(port.sent.size(), 5u);
  EXPECT_EQ(core.counters().combined, 0u);
}

TEST_F(RelayCoreTest, AddsToOneKeyGoUpAsTheirSumAndEachClientGetsADistinctResultInArrivalOrder) {
  core.execute(1, add("init/", 1));
  core.execute(2, add("init/", 5));
  core.execute(3, add("init/", 1));
  core.execute(4, add("other", 1));
  core.flush_batches();
  ASSERT_EQ(port.sent.size(), 2u);
  EXPECT_EQ(port.sent[0].request.integer, 7);
  // The store had 10: the three adds ran as 10+1, +5, +1.
  core.on_reply(port.sent[0].tag, integer_reply(17));
  EXPECT_EQ(port.take(1), i64(11));
  EXPECT_EQ(port.take(2), i64(16));
  EXPECT_EQ(port.take(3), i64(17));
  core.on_reply(port.sent[1].tag, integer_reply(1));
  EXPECT_EQ(port.take(4), i64(1));
}

TEST_F(RelayCoreTest, PollingAddsOfZeroAllReadTheStoresValue) {
  for (ConnId c : {1, 2, 3, 4}) core.execute(c, add("/barrier", 0));
  core.flush_batches();
  ASSERT_EQ(port.sent.size(), 1u);
  core.on_reply(port.sent[0].tag, integer_reply(4));
  for (ConnId c : {1, 2, 3, 4}) EXPECT_EQ(port.take(c), i64(4));
}

TEST_F(RelayCoreTest, AnAddWhoseClientLeftStillCountsForTheOthersResults) {
  core.execute(1, add("/n", 2));
  core.execute(2, add("/n", 3));
  core.forget(1);
  core.flush_batches();
  ASSERT_EQ(port.sent.size(), 1u);
  EXPECT_EQ(port.sent[0].request.integer, 5);  // sent: client 1's add was made
  core.on_reply(port.sent[0].tag, integer_reply(5));
  EXPECT_EQ(port.take(2), i64(5));
}

TEST_F(RelayCoreTest, RequestsOfClientsThatAllLeftBeforeTheFlushAreNotSent) {
  core.execute(1, get("/k"));
  core.execute(2, add("/n", 1));
  core.forget(1);
  core.forget(2);
  core.flush_batches();
  EXPECT_TRUE(port.sent.empty());
  EXPECT_EQ(core.held_bytes(), 0u) << "nothing held once they left";
}

TEST_F(RelayCoreTest, AnOverflowingAddFailsOnlyTheClientThatWouldOverflow) {
  core.execute(1, add("/n", INT64_MAX));
  auto res = core.execute(2, add("/n", 1));
  EXPECT_TRUE(res.close);
  EXPECT_NE(res.reason.find("overflow"), std::string::npos) << res.reason;
  core.flush_batches();
  ASSERT_EQ(port.sent.size(), 1u);
  EXPECT_EQ(port.sent[0].request.integer, INT64_MAX);
}

TEST_F(RelayCoreTest, IdenticalWaitsJoinOneUpstreamWaitAndAreAllReleased) {
  EXPECT_FALSE(core.execute(1, wait({"/id"})).hold) << "a waiting client may still send CANCEL_WAIT";
  core.execute(2, wait({"/id"}));
  core.flush_batches();
  ASSERT_EQ(port.sent.size(), 1u);
  core.execute(3, wait({"/id"}));  // joins the one in flight: sent after anything client 3 did
  core.flush_batches();
  ASSERT_EQ(port.sent.size(), 1u);
  core.on_reply(port.sent[0].tag, u8_reply(0));
  for (ConnId c : {1, 2, 3}) EXPECT_EQ(port.take(c), kStop) << c;
  EXPECT_TRUE(port.resumed.empty()) << "waits are not held";
}

TEST_F(RelayCoreTest, AClientDoesNotJoinAWaitSentBeforeItsOwnLastRequest) {
  core.execute(1, wait({"/k"}));
  core.flush_batches();
  ASSERT_EQ(port.sent.size(), 1u);
  // Client 2 writes after that WAIT went up, then waits: the store must run its WAIT after its SET.
  core.execute(2, set("/other", "x"));
  core.execute(2, wait({"/k"}));
  core.flush_batches();
  ASSERT_EQ(port.sent.size(), 3u);
  EXPECT_EQ(port.sent[1].request.command, Command::kSet);
  EXPECT_EQ(port.sent[2].request.command, Command::kWait);
  core.on_reply(port.sent[2].tag, u8_reply(0));
  EXPECT_EQ(port.take(2), kStop);
  EXPECT_EQ(port.take(1), "");
}

TEST_F(RelayCoreTest, ANewRequestEndsTheClientsWaitAndAWaitNobodyWantsIsCanceledUpstream) {
  core.execute(1, wait({"/never"}));
  core.flush_batches();
  const auto tag = port.sent[0].tag;
  // torch 1.13 timed out silently and goes on with another request.
  core.execute(1, get("/x"));
  ASSERT_EQ(port.sent.size(), 2u);
  EXPECT_EQ(port.sent[1].tag, tag);
  EXPECT_EQ(port.sent[1].request.command, Command::kCancelWait);
  // The STOP_WAITING that crossed the cancel, then WAIT_CANCELED: nothing reaches the client.
  EXPECT_TRUE(core.on_reply(tag, u8_reply(0)));
  EXPECT_TRUE(core.on_reply(tag, u8_reply(1)));
  EXPECT_EQ(port.take(1), "");
  EXPECT_FALSE(core.on_reply(tag, u8_reply(0))) << "the tag is done";
}

TEST_F(RelayCoreTest, CancelWaitIsAnsweredAtOnceAndTheOthersKeepWaiting) {
  core.execute(1, wait({"/k"}));
  core.execute(2, wait({"/k"}));
  core.flush_batches();
  core.execute(1, {.command = Command::kCancelWait});
  EXPECT_EQ(port.take(1), kCanceled);
  EXPECT_EQ(port.sent.size(), 1u) << "client 2 still waits: no cancel upstream";
  core.on_reply(port.sent[0].tag, u8_reply(0));
  EXPECT_EQ(port.take(2), kStop);
  EXPECT_EQ(port.take(1), "");
}

TEST_F(RelayCoreTest, CancelWaitAfterTheWaitWasAnsweredGivesStopThenCanceled) {
  core.execute(1, wait({"/k"}));
  core.flush_batches();
  core.on_reply(port.sent[0].tag, u8_reply(0));
  core.execute(1, {.command = Command::kCancelWait});
  EXPECT_EQ(port.take(1), kStop + kCanceled);
}

TEST_F(RelayCoreTest, AWaitForNoKeyPingAndValidateAreAnsweredHere) {
  core.execute(1, wait({}));
  core.execute(1, {.command = Command::kPing, .u32 = 0x1234});
  core.execute(1, {.command = Command::kValidate, .u32 = protocol::kValidationMagic});
  EXPECT_TRUE(port.sent.empty());
  std::string ping;
  protocol::put_u32(ping, 0x1234);
  EXPECT_EQ(port.take(1), kStop + ping);
  EXPECT_TRUE(core.execute(1, {.command = Command::kValidate, .u32 = 1}).close);
}

TEST_F(RelayCoreTest, WritesGoUpAtOnceInTheClientsOrderBeforeItsNextRead) {
  core.execute(1, set("/a", "1"));
  core.execute(1, {.command = Command::kAppend, .keys = {"/a"}, .values = {"2"}});
  EXPECT_EQ(port.sent.size(), 2u) << "no flush needed for writes";
  core.execute(1, get("/a"));
  core.flush_batches();
  ASSERT_EQ(port.sent.size(), 3u);
  EXPECT_LT(port.sent[1].tag, port.sent[2].tag);
  EXPECT_EQ(port.sent[2].request.command, Command::kGet);
}

TEST_F(RelayCoreTest, ARefusedRequestFailsEveryClientWaitingForItAndOnlyThem) {
  core.execute(1, get("/missing"));
  core.execute(2, get("/missing"));
  core.execute(3, get("/there"));
  core.flush_batches();
  ASSERT_EQ(port.sent.size(), 2u);
  EXPECT_TRUE(core.on_refused(port.sent[0].tag, "GET of missing key '/missing'"));
  EXPECT_EQ(port.failed.size(), 2u);
  EXPECT_NE(port.failed[1].find("GET of missing key"), std::string::npos);
  EXPECT_TRUE(port.failed.count(2));
  core.on_reply(port.sent[1].tag, value_reply("x"));
  EXPECT_EQ(port.take(3), bytes_of("x"));
}

TEST_F(RelayCoreTest, ARefusedWriteFailsItsClientAndFencesBoundWhatIsRemembered) {
  core.execute(7, set("/a", "1"));
  const auto tag = port.sent[0].tag;
  EXPECT_TRUE(core.on_refused(tag, "memory limit"));
  EXPECT_TRUE(port.failed.count(7));
  // Many writes without a reply: a PING fence goes up, and its answer lets them go.
  for (std::size_t i = 0; i < RelayCore::kFenceEvery; ++i) core.execute(8, set("/b", "x"));
  const auto& last = port.sent.back();
  ASSERT_EQ(last.request.command, Command::kPing);
  const auto held = core.held_bytes();
  EXPECT_TRUE(core.on_reply(last.tag, {}));
  EXPECT_LT(core.held_bytes(), held);
}

TEST_F(RelayCoreTest, ConnectionBoundCommandsAreNotRelayed) {
  for (Command c : {Command::kWatchKey, Command::kOnClose, Command::kMultiplex}) {
    auto res = core.execute(1, {.command = c, .keys = {"/k"}, .values = {"v"}, .integer = 1});
    EXPECT_TRUE(res.close) << protocol::command_name(c);
    EXPECT_NE(res.reason.find("not relayed"), std::string::npos);
  }
  EXPECT_TRUE(port.sent.empty());
}

TEST_F(RelayCoreTest, EverythingElseGoesUpAsItIsAndItsReplyReachesItsClient) {
  core.execute(1, {.command = Command::kCompareSet, .keys = {"/k"}, .values = {"", "v"}});
  ASSERT_EQ(port.sent.size(), 1u) << "sent at once";
  core.on_reply(port.sent[0].tag, value_reply("v"));
  EXPECT_EQ(port.take(1), bytes_of("v"));
  core.execute(1, {.command = Command::kDeleteKey, .keys = {"/k"}});
  core.on_reply(port.sent[1].tag, integer_reply(1));
  EXPECT_EQ(port.take(1), i64(1));
}

TEST_F(RelayCoreTest, ARequestBeyondTheMemoryLimitFailsItsClientAndSendsNothing) {
  RelayCore small(port, 4096);
  auto res = small.execute(1, set("/big", std::string(100, 'x')));
  EXPECT_FALSE(res.close) << "a write's bytes go straight to the upstream buffer";
  res = small.execute(2, {.command = Command::kMultiGet, .keys = {std::string(5000, 'k')}});
  EXPECT_TRUE(res.close);
  EXPECT_EQ(res.refusal, Refusal::kMemory);
  small.flush_batches();
  EXPECT_EQ(port.sent.size(), 1u);
}

TEST_F(RelayCoreTest, ACongestedUpstreamHoldsClientsUntilItDrains) {
  port.congested_now = true;
  auto res = core.execute(1, get("/k"));
  EXPECT_TRUE(res.hold);
  EXPECT_TRUE(res.more) << "not taken: stepped again on resume";
  EXPECT_EQ(core.counters().client_requests, 0u);
  port.congested_now = false;
  core.decongested();
  EXPECT_EQ(port.resumed, (std::vector<ConnId>{1}));
  EXPECT_TRUE(core.execute(1, get("/k")).hold);
  core.flush_batches();
  EXPECT_EQ(port.sent.size(), 1u);
}

TEST_F(RelayCoreTest, WaitsOnAKeyUsedAsAQueueAreNotJoined) {
  // A push wakes one waiter of a queue: two consumers' waits must stay two.
  core.execute(1, {.command = Command::kQueueLen, .keys = {"/q"}});
  core.on_reply(port.sent[0].tag, integer_reply(0));
  core.execute(2, wait({"/q"}));
  core.execute(3, wait({"/q"}));
  core.flush_batches();
  ASSERT_EQ(port.sent.size(), 3u);
  EXPECT_EQ(port.sent[1].request.command, Command::kWait);
  EXPECT_EQ(port.sent[2].request.command, Command::kWait);
  core.on_reply(port.sent[1].tag, u8_reply(0));
  EXPECT_EQ(port.take(2), kStop);
  EXPECT_EQ(port.take(3), "");
}

TEST_F(RelayCoreTest, AReplyForATagNothingCarriesIsAnError) {
  EXPECT_FALSE(core.on_reply(42, {}));
  EXPECT_EQ(core.sent(42), nullptr);
}

TEST_F(RelayCoreTest, ResetDropsEverythingPending) {
  core.execute(1, get("/k"));
  core.execute(2, wait({"/w"}));
  core.flush_batches();
  core.reset();
  EXPECT_EQ(core.in_flight(), 0u);
  core.forget(1);
  core.forget(2);
  EXPECT_EQ(core.held_bytes(), 0u);
}

}  // namespace
}  // namespace ctrun::store::detail
