// The wire codec: every command of both dialects round-trips, whole and byte by byte; pipelined requests;
// limits and malformed input fail before allocation; dialect detection; bytes that match the captures.
#include <gtest/gtest.h>

#include <cstring>
#include <limits>
#include <set>

#include <fmt/format.h>

#include "store/protocol.hpp"

namespace ctrun::store::protocol {
namespace {

std::span<const std::uint8_t> as_span(const std::string& s) {
  return {reinterpret_cast<const std::uint8_t*>(s.data()), s.size()};
}

std::string hex(std::string_view s) {
  std::string out;
  for (unsigned char c : s) out += fmt::format("{:02x}", c);
  return out;
}

// A representative request for each command, with binary keys/values (NULs, 0xff) where it has any.
Request sample(Command c) {
  Request r;
  r.command = c;
  const std::string key("/k\0\xff", 4);
  const std::string val("v\0al\xfe", 5);
  switch (c) {
    case Command::kValidate:
      r.u32 = kValidationMagic;
      break;
    case Command::kPing:
      r.u32 = 0x12345678;
      break;
    case Command::kMultiplex:
      r.u32 = kMultiplexVersion;
      break;
    case Command::kSet:
    case Command::kAppend:
    case Command::kQueuePush:
      r.keys = {key};
      r.values = {val};
      break;
    case Command::kCompareSet:
      r.keys = {key};
      r.values = {"", val};
      break;
    case Command::kGet:
    case Command::kDeleteKey:
    case Command::kWatchKey:
    case Command::kQueuePop:
    case Command::kQueueLen:
      r.keys = {key};
      break;
    case Command::kAdd:
      r.keys = {"init/"};
      r.integer = -7;
      break;
    case Command::kBarrier:
      r.keys = {key};
      r.integer = 4;
      break;
    case Command::kOnClose:
      r.keys = {key};
      r.values = {val};
      r.integer = 1;
      break;
    case Command::kCheck:
    case Command::kWait:
    case Command::kMultiGet:
      r.keys = {key, "/b", ""};
      break;
    case Command::kMultiSet:
      r.keys = {key, "/b"};
      r.values = {val, ""};
      break;
    case Command::kOnSilence:
      r.keys = {key};
      r.values = {val, ""};
      r.integer = 12500;
      break;
    case Command::kPeek:
      r.keys = {key, "/b", ""};
      r.values = {std::string("\x01", 1)};
      break;
    case Command::kGetNumKeys:
    case Command::kCancelWait:
    case Command::kListKeys:
      break;
  }
  return r;
}

void expect_same(const Request& a, const Request& b) {
  EXPECT_EQ(a.command, b.command);
  EXPECT_EQ(a.keys, b.keys);
  EXPECT_EQ(a.values, b.values);
  EXPECT_EQ(a.integer, b.integer);
  EXPECT_EQ(a.u32, b.u32);
}

constexpr Command kAll[] = {Command::kValidate, Command::kSet,        Command::kCompareSet, Command::kGet,
                            Command::kAdd,      Command::kCheck,      Command::kWait,       Command::kGetNumKeys,
                            Command::kWatchKey, Command::kDeleteKey,  Command::kAppend,     Command::kMultiGet,
                            Command::kMultiSet, Command::kCancelWait, Command::kPing,       Command::kQueuePush,
                            Command::kQueuePop, Command::kQueueLen,   Command::kListKeys,   Command::kBarrier,
                            Command::kOnClose,  Command::kMultiplex,  Command::kOnSilence, Command::kPeek};

TEST(Protocol, OpcodeTablesMatchTorch) {
  // Legacy = torch 1.13 (SET=0 ... WATCH_KEY=7, DELETE_KEY=8); v2 = torch >= 2.1 (VALIDATE=0 ... BARRIER=18).
  EXPECT_EQ(opcode_of(Dialect::kLegacy, Command::kSet), 0);
  EXPECT_EQ(opcode_of(Dialect::kLegacy, Command::kAdd), 3);
  EXPECT_EQ(opcode_of(Dialect::kLegacy, Command::kGetNumKeys), 6);
  EXPECT_EQ(opcode_of(Dialect::kLegacy, Command::kWatchKey), 7);
  EXPECT_EQ(opcode_of(Dialect::kLegacy, Command::kDeleteKey), 8);
  EXPECT_FALSE(opcode_of(Dialect::kLegacy, Command::kAppend));
  EXPECT_FALSE(opcode_of(Dialect::kLegacy, Command::kValidate));
  EXPECT_FALSE(opcode_of(Dialect::kLegacy, Command::kCancelWait));
  EXPECT_EQ(opcode_of(Dialect::kV2, Command::kValidate), 0);
  EXPECT_EQ(opcode_of(Dialect::kV2, Command::kSet), 1);
  EXPECT_EQ(opcode_of(Dialect::kV2, Command::kDeleteKey), 8);
  EXPECT_EQ(opcode_of(Dialect::kV2, Command::kCancelWait), 12);
  EXPECT_EQ(opcode_of(Dialect::kV2, Command::kPing), 13);
  EXPECT_EQ(opcode_of(Dialect::kV2, Command::kBarrier), 18);
  EXPECT_FALSE(opcode_of(Dialect::kV2, Command::kWatchKey));
  EXPECT_FALSE(command_of(Dialect::kV2, 19));
  // ctrun's extension, far above torch's opcodes (a future torch adding 19, 20, ... cannot collide) and v2 only.
  EXPECT_EQ(opcode_of(Dialect::kV2, Command::kOnClose), kOnCloseOpcode);
  EXPECT_EQ(command_of(Dialect::kV2, kOnCloseOpcode), Command::kOnClose);
  EXPECT_FALSE(opcode_of(Dialect::kLegacy, Command::kOnClose));
  EXPECT_FALSE(command_of(Dialect::kLegacy, kOnCloseOpcode));
  EXPECT_EQ(opcode_of(Dialect::kV2, Command::kMultiplex), kMultiplexOpcode);
  EXPECT_EQ(command_of(Dialect::kV2, kMultiplexOpcode), Command::kMultiplex);
  EXPECT_FALSE(opcode_of(Dialect::kLegacy, Command::kMultiplex));
  EXPECT_EQ(opcode_of(Dialect::kV2, Command::kOnSilence), kOnSilenceOpcode);
  EXPECT_EQ(command_of(Dialect::kV2, kOnSilenceOpcode), Command::kOnSilence);
  EXPECT_FALSE(command_of(Dialect::kLegacy, kOnSilenceOpcode));
  EXPECT_EQ(opcode_of(Dialect::kV2, Command::kPeek), kPeekOpcode);
  EXPECT_EQ(command_of(Dialect::kV2, kPeekOpcode), Command::kPeek);
  EXPECT_FALSE(command_of(Dialect::kLegacy, kPeekOpcode));
  // Each extension has an opcode of its own.
  const std::set<std::uint8_t> extensions{kOnCloseOpcode, kMultiplexOpcode, kOnSilenceOpcode, kPeekOpcode};
  EXPECT_EQ(extensions.size(), 4u);
  EXPECT_FALSE(command_of(Dialect::kLegacy, 9));
  for (auto c : kAll)
    for (auto d : {Dialect::kLegacy, Dialect::kV2}) {
      if (auto op = opcode_of(d, c)) {
        EXPECT_EQ(command_of(d, *op), c) << command_name(c);
      }
    }
}

TEST(Protocol, EveryCommandRoundTripsWholeAndByteByByte) {
  int tested = 0;
  for (auto d : {Dialect::kLegacy, Dialect::kV2}) {
    for (auto c : kAll) {
      if (!opcode_of(d, c)) {
        std::string out;
        EXPECT_THROW(encode_request(d, sample(c), out), std::invalid_argument) << command_name(c);
        continue;
      }
      SCOPED_TRACE(fmt::format("{} {}", d == Dialect::kLegacy ? "legacy" : "v2", command_name(c)));
      std::string wire;
      encode_request(d, sample(c), wire);
      auto whole = parse_request(d, as_span(wire), Limits{});
      ASSERT_EQ(whole.status, ParseStatus::kOk) << whole.error;
      EXPECT_EQ(whole.consumed, wire.size());
      expect_same(whole.request, sample(c));
      // Every proper prefix needs more, and says how much at least (always beyond what it has).
      for (std::size_t n = 0; n < wire.size(); ++n) {
        auto part = parse_request(d, as_span(wire).first(n), Limits{});
        ASSERT_EQ(part.status, ParseStatus::kNeedMore) << "prefix " << n;
        EXPECT_GT(part.need_at_least, n);
        EXPECT_LE(part.need_at_least, wire.size());
      }
      ++tested;
    }
  }
  EXPECT_EQ(tested, 9 + 19 + 4);  // + ctrun's ON_CLOSE, MULTIPLEX, ON_SILENCE and PEEK (v2)
}

// ctrun's tagged mode: a tag before each v2 request; replies framed with the tag and a status.
TEST(Protocol, TaggedRequestsAndFramesRoundTripWholeAndCut) {
  int tested = 0;
  for (auto c : kAll) {
    if (!opcode_of(Dialect::kV2, c)) continue;
    SCOPED_TRACE(command_name(c));
    std::string wire;
    encode_tagged_request(0x0102030405060708ull, sample(c), wire);
    std::uint64_t tag = 0;
    auto whole = parse_tagged_request(as_span(wire), Limits{}, tag);
    ASSERT_EQ(whole.status, ParseStatus::kOk) << whole.error;
    EXPECT_EQ(whole.consumed, wire.size());
    EXPECT_EQ(tag, 0x0102030405060708ull);
    expect_same(whole.request, sample(c));
    for (std::size_t n = 0; n < wire.size(); ++n) {
      auto part = parse_tagged_request(as_span(wire).first(n), Limits{}, tag);
      ASSERT_EQ(part.status, ParseStatus::kNeedMore) << "prefix " << n;
      EXPECT_GT(part.need_at_least, n);
      EXPECT_LE(part.need_at_least, wire.size());
    }
    ++tested;
  }
  EXPECT_EQ(tested, 19 + 4);  // torch's 19 and ctrun's ON_CLOSE, MULTIPLEX, ON_SILENCE and PEEK
  // Frames: a reply under its tag (its shape from the request sent under it), a refusal with its reason.
  const Request get{.command = Command::kGet, .keys = {"/k"}};
  std::string frames;
  StringOut out{frames};
  reply::frame(out, 7, FrameStatus::kReply);
  reply::value(out, std::string_view("v\0v", 3));
  reply::refused_frame(out, 9, "GET of missing key '/x'");
  const SentLookup sent = [&](std::uint64_t t) { return t == 7 || t == 9 ? &get : nullptr; };
  auto first = parse_tagged_reply(as_span(frames), sent, 1 << 20);
  ASSERT_EQ(first.status, ParseStatus::kOk) << first.error;
  EXPECT_EQ(first.tag, 7u);
  EXPECT_EQ(first.frame, FrameStatus::kReply);
  EXPECT_EQ(first.reply.values, std::vector<std::string>{std::string("v\0v", 3)});
  auto second = parse_tagged_reply(as_span(frames).subspan(first.consumed), sent, 1 << 20);
  ASSERT_EQ(second.status, ParseStatus::kOk) << second.error;
  EXPECT_EQ(second.tag, 9u);
  EXPECT_EQ(second.frame, FrameStatus::kRefused);
  EXPECT_EQ(second.refusal, "GET of missing key '/x'");
  EXPECT_EQ(first.consumed + second.consumed, frames.size());
  for (std::size_t n = 0; n < first.consumed; ++n) {
    auto part = parse_tagged_reply(as_span(frames).first(n), sent, 1 << 20);
    ASSERT_EQ(part.status, ParseStatus::kNeedMore) << "cut at " << n;
    EXPECT_GT(part.need_at_least, n);
  }
  // A frame for a tag no request carries, or with an unknown status, is an error (the connection is dropped).
  std::string unknown;
  StringOut u{unknown};
  reply::frame(u, 8, FrameStatus::kReply);
  u.i64(1);
  EXPECT_EQ(parse_tagged_reply(as_span(unknown), sent, 1 << 20).status, ParseStatus::kError);
  unknown[8] = 5;
  EXPECT_EQ(parse_tagged_reply(as_span(unknown), sent, 1 << 20).status, ParseStatus::kError);
}

TEST(Protocol, PipelinedRequestsParseOneAtATime) {
  std::string wire;
  for (auto c : {Command::kValidate, Command::kPing, Command::kAdd, Command::kSet, Command::kWait})
    encode_request(Dialect::kV2, sample(c), wire);
  std::size_t off = 0;
  std::vector<Command> seen;
  while (off < wire.size()) {
    auto r = parse_request(Dialect::kV2, as_span(wire).subspan(off), Limits{});
    ASSERT_EQ(r.status, ParseStatus::kOk);
    seen.push_back(r.request.command);
    off += r.consumed;
  }
  EXPECT_EQ(seen,
            (std::vector<Command>{Command::kValidate, Command::kPing, Command::kAdd, Command::kSet, Command::kWait}));
}

TEST(Protocol, BytesMatchTheCaptures) {
  // From tests/store/interop_traces/README.md: 1.13 `ADD "init/" 1` and 2.6's VALIDATE + PING.
  std::string legacy_add;
  Request add{.command = Command::kAdd, .keys = {"init/"}, .values = {}, .integer = 1, .u32 = 0};
  encode_request(Dialect::kLegacy, add, legacy_add);
  EXPECT_EQ(hex(legacy_add), "030500000000000000696e69742f0100000000000000");
  std::string v2;
  encode_request(Dialect::kV2, Request{.command = Command::kValidate, .u32 = kValidationMagic}, v2);
  encode_request(Dialect::kV2, Request{.command = Command::kPing, .u32 = 4242}, v2);
  EXPECT_EQ(hex(v2), "00cef7853c0d92100000");
  std::string reply;
  put_i64(reply, 1);
  put_u32(reply, 4242);
  put_bytes(reply, std::string_view("ab\0", 3));
  EXPECT_EQ(hex(reply),
            "0100000000000000"
            "92100000"
            "0300000000000000616200");
  const auto* p = reinterpret_cast<const std::uint8_t*>(reply.data());
  EXPECT_EQ(get_i64(p), 1);
  EXPECT_EQ(get_u32(p + 8), 4242u);
  EXPECT_EQ(get_u64(p + 12), 3u);
}

TEST(Protocol, DetectDialect) {
  auto det = [](std::string s) { return detect_dialect(as_span(s)); };
  EXPECT_EQ(det(""), Detected::kNeedMore);
  EXPECT_EQ(det("\x06"), Detected::kLegacy);  // 1.13 GETNUMKEYS: one byte, then it waits for the reply
  EXPECT_EQ(det("\x03"), Detected::kLegacy);
  EXPECT_EQ(det(std::string("\0", 1)), Detected::kNeedMore);
  EXPECT_EQ(det(std::string("\0\xce\xf7", 3)), Detected::kNeedMore);
  EXPECT_EQ(det(std::string("\0\xce\xf7\x85\x3c", 5)), Detected::kV2);
  EXPECT_EQ(det(std::string("\0\xce\xf7\x85\x3c\x0d", 6)), Detected::kV2);
  // A legacy SET (opcode 0) with a short key: the length bytes differ from the magic -> legacy at once.
  EXPECT_EQ(det(std::string("\0\x03", 2)), Detected::kLegacy);
  EXPECT_EQ(det(std::string("\0\xce\xf7\x85\x3d", 5)), Detected::kLegacy);
}

TEST(Protocol, UnknownOpcodesAreErrors) {
  std::string b(1, '\x09');
  EXPECT_EQ(parse_request(Dialect::kLegacy, as_span(b), Limits{}).status, ParseStatus::kError);
  b = std::string(1, '\x13');
  EXPECT_EQ(parse_request(Dialect::kV2, as_span(b), Limits{}).status, ParseStatus::kError);
  b = std::string(1, '\xff');
  auto r = parse_request(Dialect::kV2, as_span(b), Limits{});
  EXPECT_EQ(r.status, ParseStatus::kError);
  EXPECT_NE(r.error.find("opcode"), std::string::npos);
}

std::string with_len(std::uint8_t op, std::uint64_t len) {
  std::string s(1, static_cast<char>(op));
  put_u64(s, len);
  return s;
}

TEST(Protocol, LimitsFailBeforeTheBytesArrive) {
  Limits lim;
  lim.max_key_len = 16;
  lim.max_value_len = 32;
  lim.max_keys_per_request = 4;
  lim.max_request_bytes = 1000;
  // A key length over the limit is an error with only its 8 length bytes present, up to 2^64-1.
  for (std::uint64_t len : {std::uint64_t{17}, std::uint64_t{1} << 40, std::numeric_limits<std::uint64_t>::max()}) {
    auto r = parse_request(Dialect::kV2, as_span(with_len(3 /*GET*/, len)), lim);
    EXPECT_EQ(r.status, ParseStatus::kError) << len;
    r = parse_request(Dialect::kLegacy, as_span(with_len(2 /*GET*/, len)), lim);
    EXPECT_EQ(r.status, ParseStatus::kError) << len;
  }
  // At the limit it is fine (needs more bytes).
  EXPECT_EQ(parse_request(Dialect::kV2, as_span(with_len(3, 16)), lim).status, ParseStatus::kNeedMore);
  // Value over the limit.
  std::string set(1, '\x01');
  put_bytes(set, "k");
  put_u64(set, 33);
  EXPECT_EQ(parse_request(Dialect::kV2, as_span(set), lim).status, ParseStatus::kError);
  // Too many keys (CHECK, WAIT, MULTI_GET u64 count; MULTI_SET i64 count, negative too).
  for (std::uint8_t op : {5, 6, 10, 11}) {
    EXPECT_EQ(parse_request(Dialect::kV2, as_span(with_len(op, 5)), lim).status, ParseStatus::kError) << int(op);
    EXPECT_EQ(parse_request(Dialect::kV2, as_span(with_len(op, ~0ull)), lim).status, ParseStatus::kError);
  }
  // A whole request bigger than max_request_bytes (many values, each within limits).
  Limits small = lim;
  small.max_request_bytes = 64;
  Request ms{.command = Command::kMultiSet,
             .keys = {"a", "b", "c"},
             .values = {std::string(30, 'x'), std::string(30, 'y'), std::string(30, 'z')}};
  std::string wire;
  encode_request(Dialect::kV2, ms, wire);
  bool saw_error = false;
  for (std::size_t n = 1; n <= wire.size() && !saw_error; ++n)
    saw_error = parse_request(Dialect::kV2, as_span(wire).first(n), small).status == ParseStatus::kError;
  EXPECT_TRUE(saw_error);
  EXPECT_EQ(parse_request(Dialect::kV2, as_span(wire), lim).status, ParseStatus::kOk);
}

TEST(Protocol, EncodeRejectsMalformedRequests) {
  std::string out;
  EXPECT_THROW(encode_request(Dialect::kV2, Request{.command = Command::kSet, .keys = {"k"}}, out),
               std::invalid_argument);
  EXPECT_THROW(encode_request(Dialect::kV2, Request{.command = Command::kMultiSet, .keys = {"k"}}, out),
               std::invalid_argument);
  EXPECT_THROW(encode_request(Dialect::kLegacy, Request{.command = Command::kMultiGet}, out), std::invalid_argument);
}

// PEEK names at most kMaxPeekKeys keys: a bigger one is a malformed request (a MULTI_GET reads more, in slices).
TEST(Protocol, PeekOfTooManyKeysIsRefusedBeforeItsKeysArrive) {
  std::string wire;
  Request ok{.command = Command::kPeek, .values = {"\x01"}};
  ok.keys.assign(kMaxPeekKeys, "k");
  encode_request(Dialect::kV2, ok, wire);
  EXPECT_EQ(parse_request(Dialect::kV2, as_span(wire), Limits{}).status, ParseStatus::kOk);
  wire.clear();
  wire.push_back(static_cast<char>(kPeekOpcode));
  const std::uint64_t n = kMaxPeekKeys + 1;  // the count alone: the keys never come
  wire.append(reinterpret_cast<const char*>(&n), sizeof(n));
  auto r = parse_request(Dialect::kV2, as_span(wire), Limits{});
  EXPECT_EQ(r.status, ParseStatus::kError);
  EXPECT_NE(r.error.find("PEEK"), std::string::npos) << r.error;
}

TEST(Protocol, EmptyListsAndValues) {
  for (auto c : {Command::kCheck, Command::kWait, Command::kMultiGet, Command::kMultiSet}) {
    std::string wire;
    encode_request(Dialect::kV2, Request{.command = c}, wire);
    EXPECT_EQ(wire.size(), 9u);
    auto r = parse_request(Dialect::kV2, as_span(wire), Limits{});
    ASSERT_EQ(r.status, ParseStatus::kOk);
    EXPECT_TRUE(r.request.keys.empty());
  }
}

}  // namespace
}  // namespace ctrun::store::protocol
