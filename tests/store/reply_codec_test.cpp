// The reply half of the codec: every reply of both dialects encodes and decodes back to itself, whole and
// cut anywhere; the bytes are PyTorch's; lengths over the limit fail before allocation; the server's
// ReplyBuffer (shared values, gather writes) and a plain string get the same bytes from the same encoders.
#include <gtest/gtest.h>

#include <sys/uio.h>

#include <memory>

#include "store/protocol.hpp"
#include "store/reply_buffer.hpp"

namespace ctrun::store::protocol {
namespace {

std::span<const std::uint8_t> as_span(const std::string& s) {
  return {reinterpret_cast<const std::uint8_t*>(s.data()), s.size()};
}

const std::string kBin("v\0al\xfe", 5);

// The request a reply answers, and a representative reply to it.
std::pair<Request, Reply> sample(Command c) {
  Request q{.command = c};
  Reply r;
  switch (c) {
    case Command::kCheck:
      r.u8 = 1;
      break;
    case Command::kWait:
    case Command::kBarrier:
      r.u8 = 0;
      break;
    case Command::kCancelWait:
      r.u8 = 1;
      break;
    case Command::kWatchKey:
      r.u8 = 3;
      break;
    case Command::kPing:
    case Command::kMultiplex:
      r.u32 = 0xDEADBEEF;
      break;
    case Command::kAdd:
      r.integer = -42;
      break;
    case Command::kGetNumKeys:
      r.integer = 7;
      break;
    case Command::kDeleteKey:
      r.integer = 1;
      break;
    case Command::kQueueLen:
    case Command::kOnClose:
    case Command::kOnSilence:
      r.integer = 3;
      break;
    case Command::kGet:
    case Command::kCompareSet:
      r.values = {kBin};
      break;
    case Command::kMultiGet:
    case Command::kPeek:
      q.keys = {"a", "b", "c"};
      r.values = {kBin, "", std::string(3000, 'x')};
      break;
    case Command::kListKeys:
      r.values = {"/a", std::string("\0k", 2), ""};
      r.integer = 3;
      break;
    case Command::kQueuePop:
      r.integer = 2;
      r.values = {kBin};
      break;
    default:
      break;
  }
  return {q, r};
}

TEST(ReplyCodec, EveryReplyOfBothDialectsRoundTripsWholeAndCut) {
  int checked = 0;
  for (Dialect d : {Dialect::kLegacy, Dialect::kV2}) {
    for (int i = 0; i <= static_cast<int>(kLastCommand); ++i) {
      const auto c = static_cast<Command>(i);
      if (!opcode_of(d, c) || !has_reply(c)) continue;
      auto [q, r] = sample(c);
      std::string bytes;
      encode_reply(d, q, r, bytes);
      auto whole = parse_reply(d, q, as_span(bytes), 1 << 20);
      ASSERT_EQ(whole.status, ParseStatus::kOk) << command_name(c) << ": " << whole.error;
      EXPECT_EQ(whole.consumed, bytes.size()) << command_name(c);
      EXPECT_EQ(whole.reply, r) << command_name(c);
      // Followed by the next reply's bytes: only its own are consumed.
      auto pipelined = parse_reply(d, q, as_span(bytes + bytes), 1 << 20);
      EXPECT_EQ(pipelined.consumed, bytes.size()) << command_name(c);
      for (std::size_t cut = 0; cut < bytes.size(); cut += (cut < 64 ? 1 : 257)) {
        auto part = parse_reply(d, q, as_span(bytes).first(cut), 1 << 20);
        ASSERT_EQ(part.status, ParseStatus::kNeedMore) << command_name(c) << " cut at " << cut;
        EXPECT_GT(part.need_at_least, cut) << command_name(c);
        EXPECT_LE(part.need_at_least, bytes.size()) << command_name(c);
      }
      ++checked;
    }
  }
  // legacy: 8 of its 9 commands have a reply; v2: 14 of 19, + ctrun's ON_CLOSE, MULTIPLEX, ON_SILENCE and PEEK
  EXPECT_EQ(checked, 8 + 18);
}

TEST(ReplyCodec, BytesAreTorchs) {
  std::string b;
  encode_reply(Dialect::kV2, {.command = Command::kGet}, {.values = {"ab"}}, b);
  EXPECT_EQ(b, std::string("\x02\0\0\0\0\0\0\0ab", 10));
  b.clear();
  encode_reply(Dialect::kV2, {.command = Command::kQueuePop}, {.integer = 0}, b);
  EXPECT_EQ(b, std::string(8, '\0'));  // an empty queue: the length only
  b.clear();
  encode_reply(Dialect::kLegacy, {.command = Command::kAdd}, {.integer = 1}, b);
  EXPECT_EQ(b, std::string("\x01\0\0\0\0\0\0\0", 8));
  b.clear();
  encode_reply(Dialect::kV2, {.command = Command::kCheck}, {.u8 = 0}, b);
  EXPECT_EQ(b, std::string(1, '\0'));
  b.clear();
  encode_reply(Dialect::kV2, {.command = Command::kListKeys}, {.integer = 1, .values = {"k"}}, b);
  EXPECT_EQ(b, std::string("\x01\0\0\0\0\0\0\0\x01\0\0\0\0\0\0\0k", 17));
}

TEST(ReplyCodec, CommandsWithoutAReplyOrOutsideTheDialectAreRefused) {
  std::string b;
  EXPECT_THROW(encode_reply(Dialect::kV2, {.command = Command::kSet}, {}, b), std::invalid_argument);
  EXPECT_THROW(encode_reply(Dialect::kLegacy, {.command = Command::kQueuePop}, {.integer = 0}, b),
               std::invalid_argument);
  EXPECT_EQ(parse_reply(Dialect::kLegacy, {.command = Command::kPing}, as_span("\0\0\0\0"), 64).status,
            ParseStatus::kError);
  EXPECT_EQ(parse_reply(Dialect::kV2, {.command = Command::kMultiSet}, as_span(""), 64).status, ParseStatus::kError);
}

TEST(ReplyCodec, LengthsOverTheLimitAndNegativeCountsFailBeforeAllocating) {
  std::string b;
  put_u64(b, 1ull << 40);  // a 1 TiB value announced, 8 bytes sent
  auto r = parse_reply(Dialect::kV2, {.command = Command::kGet}, as_span(b), 1 << 20);
  EXPECT_EQ(r.status, ParseStatus::kError);
  EXPECT_NE(r.error.find("exceeds the limit"), std::string::npos) << r.error;
  b.clear();
  put_i64(b, -1);
  EXPECT_EQ(parse_reply(Dialect::kV2, {.command = Command::kListKeys}, as_span(b), 64).status, ParseStatus::kError);
  EXPECT_EQ(parse_reply(Dialect::kV2, {.command = Command::kQueuePop}, as_span(b), 64).status, ParseStatus::kError);
  EXPECT_EQ(parse_reply(Dialect::kV2, {.command = Command::kCheck}, as_span("\x07"), 64).status, ParseStatus::kError);
}

TEST(ReplyCodec, WatchEventsRoundTrip) {
  WatchEvent e{WatchResponse::kKeyUpdated, "/k", kBin, "new"};
  std::string b;
  encode_watch_event(e, b);
  auto r = parse_watch_event(as_span(b), 1 << 20);
  ASSERT_EQ(r.status, ParseStatus::kOk) << r.error;
  EXPECT_EQ(r.event, e);
  EXPECT_EQ(r.consumed, b.size());
  EXPECT_EQ(parse_watch_event(as_span(b).first(b.size() - 1), 1 << 20).status, ParseStatus::kNeedMore);
}

std::string drain(const detail::ReplyBuffer& out) {
  iovec iov[64];
  const int n = out.gather(iov, 64);
  std::string s;
  for (int i = 0; i < n; ++i) s.append(static_cast<const char*>(iov[i].iov_base), iov[i].iov_len);
  return s;
}

TEST(ReplyCodec, TheServersReplyBufferAndAStringGetTheSameBytes) {
  // Large values are shared (not copied) in the ReplyBuffer; the bytes on the wire must not differ.
  auto big = std::make_shared<detail::Blob>(std::string(5000, 'z'));
  auto small = std::make_shared<detail::Blob>(kBin);
  detail::ReplyBuffer buf;
  std::string str;
  StringOut so{str};
  reply::value(buf, big);
  reply::value(so, std::string_view(big->bytes));
  reply::queue_pop(buf, 2, &small);
  std::string_view sv = small->bytes;
  reply::queue_pop(so, 2, &sv);
  reply::watch_event(buf, WatchResponse::kKeyCreated, "/w", small, big);
  reply::watch_event(so, WatchResponse::kKeyCreated, "/w", std::string_view(small->bytes),
                     std::string_view(big->bytes));
  reply::list_keys(buf, std::vector<std::string>{"a", "bc"});
  reply::list_keys(so, std::vector<std::string>{"a", "bc"});
  reply::stop_waiting(buf);
  reply::stop_waiting(so);
  reply::ping(buf, 77);
  reply::ping(so, 77);
  EXPECT_EQ(buf.size(), str.size());
  EXPECT_EQ(drain(buf), str);
}

}  // namespace
}  // namespace ctrun::store::protocol
