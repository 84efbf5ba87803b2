#include "store/protocol.hpp"

#include <algorithm>
#include <array>
#include <bit>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <utility>

#include <fmt/format.h>

namespace ctrun::store::protocol {

namespace {

constexpr std::size_t kCommandCount = static_cast<std::size_t>(kLastCommand) + 1;
constexpr std::uint8_t kNone = 0xFF;

// Opcode tables, indexed by opcode. Legacy is torch 1.13/2.0 exactly (SET=0 ... DELETE_KEY=8); the May-July
// 2023 nightlies that appended APPEND..CANCEL_WAIT are deliberately left out so that a client asking
// opcode_of(kLegacy, kAppend) learns that a real 1.13 server would drop it.
constexpr std::array<Command, 9> kLegacyTable = {
    Command::kSet,  Command::kCompareSet, Command::kGet,      Command::kAdd,       Command::kCheck,
    Command::kWait, Command::kGetNumKeys, Command::kWatchKey, Command::kDeleteKey,
};
constexpr std::array<Command, 19> kV2Table = {
    Command::kValidate, Command::kSet,      Command::kCompareSet, Command::kGet,       Command::kAdd,
    Command::kCheck,    Command::kWait,     Command::kGetNumKeys, Command::kDeleteKey, Command::kAppend,
    Command::kMultiGet, Command::kMultiSet, Command::kCancelWait, Command::kPing,      Command::kQueuePush,
    Command::kQueuePop, Command::kQueueLen, Command::kListKeys,   Command::kBarrier,
};

template <std::size_t N>
constexpr std::array<std::uint8_t, kCommandCount> invert(const std::array<Command, N>& table) {
  std::array<std::uint8_t, kCommandCount> out{};
  for (auto& o : out) o = kNone;
  for (std::size_t op = 0; op < N; ++op) out[static_cast<std::size_t>(table[op])] = static_cast<std::uint8_t>(op);
  return out;
}
constexpr auto kLegacyOpcodes = invert(kLegacyTable);
constexpr auto kV2Opcodes = invert(kV2Table);

// Bounds-checked little-endian reader over the receive buffer. Every read either succeeds, reports that more
// bytes are needed (`need` then holds how many bytes the buffer must have before a retry can make progress),
// or fails on a limit. Nothing is allocated here: lengths are validated first and strings are copied by
// the caller only once the whole request is known to be present.
class Reader {
 public:
  Reader(std::span<const std::uint8_t> buf, const Limits& limits) : buf_(buf), limits_(limits) {}

  std::size_t pos() const { return pos_; }
  std::size_t need() const { return need_; }
  const std::string& error() const { return error_; }

  bool u8(std::uint8_t& v) {
    if (!have(1)) return false;
    v = buf_[pos_++];
    return true;
  }
  bool u32(std::uint32_t& v) {
    if (!have(4)) return false;
    v = get_u32(buf_.data() + pos_);
    pos_ += 4;
    return true;
  }
  bool u64(std::uint64_t& v) {
    if (!have(8)) return false;
    v = get_u64(buf_.data() + pos_);
    pos_ += 8;
    return true;
  }
  bool i64(std::int64_t& v) {
    if (!have(8)) return false;
    v = get_i64(buf_.data() + pos_);
    pos_ += 8;
    return true;
  }
  // A length-prefixed field; `what` names it in the error. On success `out` views the bytes in the buffer.
  bool bytes(std::string_view& out, std::uint64_t max_len, const char* what) {
    std::uint64_t len = 0;
    if (!u64(len)) return false;
    if (len > max_len) return fail(fmt::format("{} length {} exceeds the limit {}", what, len, max_len));
    if (!have(static_cast<std::size_t>(len))) return false;
    out = std::string_view(reinterpret_cast<const char*>(buf_.data() + pos_), static_cast<std::size_t>(len));
    pos_ += static_cast<std::size_t>(len);
    return true;
  }
  bool key(std::string_view& out) { return bytes(out, limits_.max_key_len, "key"); }
  bool value(std::string_view& out) { return bytes(out, limits_.max_value_len, "value"); }
  bool count(std::uint64_t n) {
    if (n > limits_.max_keys_per_request)
      return fail(fmt::format("key count {} exceeds the limit {}", n, limits_.max_keys_per_request));
    return true;
  }
  bool fail(std::string why) {
    error_ = std::move(why);
    failed_ = true;
    return false;
  }
  bool failed() const { return failed_; }

 private:
  bool have(std::size_t n) {
    // Written so that a huge n cannot overflow pos_ + n.
    if (buf_.size() - pos_ >= n) return true;
    need_ = (n > SIZE_MAX - pos_) ? SIZE_MAX : pos_ + n;
    return false;
  }

  std::span<const std::uint8_t> buf_;
  const Limits& limits_;
  std::size_t pos_ = 0;
  std::size_t need_ = 0;
  std::string error_;
  bool failed_ = false;
};

// One decoding routine for both passes: with `out == nullptr` it only validates and measures (no
// allocation, so a request whose count or lengths claim gigabytes costs nothing until its bytes are here);
// with `out` it copies the fields.
bool decode_fields(Command c, Reader& r, Request* out) {
  std::string_view k, v, v2;
  auto push_key = [&](std::string_view s) {
    if (out) out->keys.emplace_back(s);
  };
  auto push_value = [&](std::string_view s) {
    if (out) out->values.emplace_back(s);
  };
  switch (c) {
    case Command::kValidate:
    case Command::kPing:
    case Command::kMultiplex: {
      std::uint32_t x = 0;
      if (!r.u32(x)) return false;
      if (out) out->u32 = x;
      return true;
    }
    case Command::kSet:
    case Command::kAppend:
    case Command::kQueuePush:
      if (!r.key(k) || !r.value(v)) return false;
      push_key(k);
      push_value(v);
      return true;
    case Command::kCompareSet:
      if (!r.key(k) || !r.value(v) || !r.value(v2)) return false;
      push_key(k);
      push_value(v);
      push_value(v2);
      return true;
    case Command::kGet:
    case Command::kDeleteKey:
    case Command::kWatchKey:
    case Command::kQueuePop:
    case Command::kQueueLen:
      if (!r.key(k)) return false;
      push_key(k);
      return true;
    case Command::kAdd:
    case Command::kBarrier: {
      std::int64_t x = 0;
      if (!r.key(k) || !r.i64(x)) return false;
      push_key(k);
      if (out) out->integer = x;
      return true;
    }
    case Command::kOnClose: {
      std::int64_t x = 0;
      if (!r.key(k) || !r.value(v) || !r.i64(x)) return false;
      if (x != 0 && x != 1) return r.fail(fmt::format("ON_CLOSE mode {} is neither 1 (register) nor 0 (cancel)", x));
      push_key(k);
      push_value(v);
      if (out) out->integer = x;
      return true;
    }
    case Command::kCheck:
    case Command::kWait:
    case Command::kMultiGet: {
      std::uint64_t n = 0;
      if (!r.u64(n) || !r.count(n)) return false;
      if (out) out->keys.reserve(static_cast<std::size_t>(n));  // safe: pass 1 saw all n keys present
      for (std::uint64_t i = 0; i < n; ++i) {
        if (!r.key(k)) return false;
        push_key(k);
      }
      return true;
    }
    case Command::kMultiSet: {
      std::int64_t n = 0;
      if (!r.i64(n)) return false;
      if (n < 0) return r.fail(fmt::format("negative MULTI_SET count {}", n));
      if (!r.count(static_cast<std::uint64_t>(n))) return false;
      if (out) {
        out->keys.reserve(static_cast<std::size_t>(n));
        out->values.reserve(static_cast<std::size_t>(n));
      }
      for (std::int64_t i = 0; i < n; ++i) {
        if (!r.key(k) || !r.value(v)) return false;
        push_key(k);
        push_value(v);
      }
      return true;
    }
    case Command::kOnSilence: {
      std::int64_t x = 0;
      if (!r.key(k) || !r.value(v) || !r.value(v2) || !r.i64(x)) return false;
      if (x < 0) return r.fail(fmt::format("ON_SILENCE timeout {} ms is negative", x));
      push_key(k);
      push_value(v);
      push_value(v2);
      if (out) out->integer = x;
      return true;
    }
    case Command::kPeek: {
      std::uint64_t n = 0;
      if (!r.u64(n) || !r.count(n)) return false;
      if (n > kMaxPeekKeys) return r.fail(fmt::format("{} keys, at most {} (a MULTI_GET reads more)", n, kMaxPeekKeys));
      if (out) out->keys.reserve(static_cast<std::size_t>(n));
      for (std::uint64_t i = 0; i < n; ++i) {
        if (!r.key(k)) return false;
        push_key(k);
      }
      if (!r.value(v)) return false;
      push_value(v);
      return true;
    }
    case Command::kGetNumKeys:
    case Command::kCancelWait:
    case Command::kListKeys:
      return true;
  }
  return r.fail("unhandled command");
}

template <typename T>
void put_le(std::string& out, T v) {
  char b[sizeof(T)];
  std::memcpy(b, &v, sizeof(T));  // x86-64 and aarch64 are little-endian, as PyTorch's wire format assumes
  out.append(b, sizeof(T));
}

static_assert(std::endian::native == std::endian::little, "the TCPStore wire format is host-order little-endian");

}  // namespace

const char* command_name(Command c) {
  switch (c) {
    case Command::kValidate:
      return "VALIDATE";
    case Command::kSet:
      return "SET";
    case Command::kCompareSet:
      return "COMPARE_SET";
    case Command::kGet:
      return "GET";
    case Command::kAdd:
      return "ADD";
    case Command::kCheck:
      return "CHECK";
    case Command::kWait:
      return "WAIT";
    case Command::kGetNumKeys:
      return "GETNUMKEYS";
    case Command::kWatchKey:
      return "WATCH_KEY";
    case Command::kDeleteKey:
      return "DELETE_KEY";
    case Command::kAppend:
      return "APPEND";
    case Command::kMultiGet:
      return "MULTI_GET";
    case Command::kMultiSet:
      return "MULTI_SET";
    case Command::kCancelWait:
      return "CANCEL_WAIT";
    case Command::kPing:
      return "PING";
    case Command::kQueuePush:
      return "QUEUE_PUSH";
    case Command::kQueuePop:
      return "QUEUE_POP";
    case Command::kQueueLen:
      return "QUEUE_LEN";
    case Command::kListKeys:
      return "LIST_KEYS";
    case Command::kBarrier:
      return "BARRIER";
    case Command::kOnClose:
      return "ON_CLOSE";
    case Command::kMultiplex:
      return "MULTIPLEX";
    case Command::kOnSilence:
      return "ON_SILENCE";
    case Command::kPeek:
      return "PEEK";
  }
  return "UNKNOWN";
}

namespace {

// ctrun's extensions: v2 only, far above torch's opcodes (a future torch adding 19, 20, ... cannot collide).
constexpr std::pair<Command, std::uint8_t> kExtensions[] = {{Command::kOnClose, kOnCloseOpcode},
                                                            {Command::kMultiplex, kMultiplexOpcode},
                                                            {Command::kOnSilence, kOnSilenceOpcode},
                                                            {Command::kPeek, kPeekOpcode}};

}  // namespace

std::optional<Command> command_of(Dialect d, std::uint8_t opcode) {
  for (auto [c, op] : kExtensions)
    if (opcode == op) return d == Dialect::kV2 ? std::optional<Command>(c) : std::nullopt;
  if (d == Dialect::kLegacy) {
    if (opcode < kLegacyTable.size()) return kLegacyTable[opcode];
  } else if (opcode < kV2Table.size()) {
    return kV2Table[opcode];
  }
  return std::nullopt;
}

std::optional<std::uint8_t> opcode_of(Dialect d, Command c) {
  auto idx = static_cast<std::size_t>(c);
  if (idx >= kCommandCount) return std::nullopt;
  for (auto [e, op] : kExtensions)
    if (c == e) return d == Dialect::kV2 ? std::optional<std::uint8_t>(op) : std::nullopt;
  std::uint8_t op = (d == Dialect::kLegacy ? kLegacyOpcodes : kV2Opcodes)[idx];
  if (op == kNone) return std::nullopt;
  return op;
}

Detected detect_dialect(std::span<const std::uint8_t> b) {
  if (b.empty()) return Detected::kNeedMore;
  if (b[0] != 0) return Detected::kLegacy;  // no v2 opcode other than VALIDATE may come first
  // A legacy client starting with SET (opcode 0) sends a u64 key length next; only the exact magic
  // bytes mean v2. Compare what has arrived so far so that a mismatch decides legacy without waiting.
  static constexpr std::uint8_t kMagic[4] = {0xCE, 0xF7, 0x85, 0x3C};
  for (std::size_t i = 1; i < b.size() && i < 5; ++i)
    if (b[i] != kMagic[i - 1]) return Detected::kLegacy;
  return b.size() >= 5 ? Detected::kV2 : Detected::kNeedMore;
}

ParseResult parse_request(Dialect d, std::span<const std::uint8_t> buf, const Limits& limits) {
  ParseResult res;
  if (buf.empty()) {
    res.need_at_least = 1;
    return res;
  }
  auto cmd = command_of(d, buf[0]);
  if (!cmd) {
    res.status = ParseStatus::kError;
    res.error = fmt::format("unknown opcode {} in the {} dialect", buf[0], d == Dialect::kLegacy ? "legacy" : "v2");
    return res;
  }
  // Pass 1: validate and measure without allocating.
  Reader scan(buf.subspan(1), limits);
  if (!decode_fields(*cmd, scan, nullptr)) {
    if (scan.failed()) {
      res.status = ParseStatus::kError;
      res.error = fmt::format("{}: {}", command_name(*cmd), scan.error());
    } else {
      res.need_at_least = scan.need() == SIZE_MAX ? SIZE_MAX : scan.need() + 1;
      if (res.need_at_least > limits.max_request_bytes) {
        res.status = ParseStatus::kError;
        res.error = fmt::format("{}: request of at least {} bytes exceeds the limit {}", command_name(*cmd),
                                res.need_at_least, limits.max_request_bytes);
      }
    }
    return res;
  }
  // Pass 2: the whole request is present; copy it out.
  Reader copy(buf.subspan(1), limits);
  res.request.command = *cmd;
  decode_fields(*cmd, copy, &res.request);
  res.status = ParseStatus::kOk;
  res.consumed = 1 + copy.pos();
  return res;
}

void encode_request(Dialect d, const Request& r, std::string& out) {
  auto op = opcode_of(d, r.command);
  if (!op)
    throw std::invalid_argument(fmt::format("{} does not exist in the {} TCPStore dialect", command_name(r.command),
                                            d == Dialect::kLegacy ? "legacy (torch <= 2.0)" : "v2"));
  auto need = [&](std::size_t nk, std::size_t nv) {
    if (r.keys.size() < nk || r.values.size() < nv)
      throw std::invalid_argument(fmt::format("{} needs {} key(s) and {} value(s)", command_name(r.command), nk, nv));
  };
  put_u8(out, *op);
  switch (r.command) {
    case Command::kValidate:
    case Command::kPing:
    case Command::kMultiplex:
      put_u32(out, r.u32);
      break;
    case Command::kSet:
    case Command::kAppend:
    case Command::kQueuePush:
      need(1, 1);
      put_bytes(out, r.keys[0]);
      put_bytes(out, r.values[0]);
      break;
    case Command::kCompareSet:
      need(1, 2);
      put_bytes(out, r.keys[0]);
      put_bytes(out, r.values[0]);
      put_bytes(out, r.values[1]);
      break;
    case Command::kGet:
    case Command::kDeleteKey:
    case Command::kWatchKey:
    case Command::kQueuePop:
    case Command::kQueueLen:
      need(1, 0);
      put_bytes(out, r.keys[0]);
      break;
    case Command::kAdd:
    case Command::kBarrier:
      need(1, 0);
      put_bytes(out, r.keys[0]);
      put_i64(out, r.integer);
      break;
    case Command::kOnClose:
      need(1, 1);
      put_bytes(out, r.keys[0]);
      put_bytes(out, r.values[0]);
      put_i64(out, r.integer);
      break;
    case Command::kCheck:
    case Command::kWait:
    case Command::kMultiGet:
      put_u64(out, r.keys.size());
      for (const auto& k : r.keys) put_bytes(out, k);
      break;
    case Command::kMultiSet:
      if (r.keys.size() != r.values.size())
        throw std::invalid_argument(fmt::format("MULTI_SET: {} keys but {} values", r.keys.size(), r.values.size()));
      put_i64(out, static_cast<std::int64_t>(r.keys.size()));
      for (std::size_t i = 0; i < r.keys.size(); ++i) {
        put_bytes(out, r.keys[i]);
        put_bytes(out, r.values[i]);
      }
      break;
    case Command::kOnSilence:
      need(1, 2);
      put_bytes(out, r.keys[0]);
      put_bytes(out, r.values[0]);
      put_bytes(out, r.values[1]);
      put_i64(out, r.integer);
      break;
    case Command::kPeek:
      need(0, 1);
      put_u64(out, r.keys.size());
      for (const auto& k : r.keys) put_bytes(out, k);
      put_bytes(out, r.values[0]);
      break;
    case Command::kGetNumKeys:
    case Command::kCancelWait:
    case Command::kListKeys:
      break;
  }
}

void StringOut::u8(std::uint8_t v) { put_u8(s, v); }
void StringOut::u32(std::uint32_t v) { put_u32(s, v); }
void StringOut::i64(std::int64_t v) { put_i64(s, v); }
void StringOut::u64(std::uint64_t v) { put_u64(s, v); }
void StringOut::bytes(std::string_view b) { put_bytes(s, b); }

bool has_reply(Command c) {
  switch (c) {
    case Command::kValidate:
    case Command::kSet:
    case Command::kAppend:
    case Command::kMultiSet:
    case Command::kQueuePush:
      return false;
    default:
      return true;
  }
}

void encode_reply(Dialect d, const Request& sent, const Reply& r, std::string& out) {
  if (!opcode_of(d, sent.command))
    throw std::invalid_argument(fmt::format("{} does not exist in this dialect", command_name(sent.command)));
  if (!has_reply(sent.command)) throw std::invalid_argument(fmt::format("{} has no reply", command_name(sent.command)));
  StringOut o{out};
  switch (sent.command) {
    case Command::kCheck:
    case Command::kWait:
    case Command::kBarrier:
    case Command::kCancelWait:
    case Command::kWatchKey:
      o.u8(r.u8);
      return;
    case Command::kPing:
    case Command::kMultiplex:
      reply::ping(o, r.u32);
      return;
    case Command::kAdd:
    case Command::kGetNumKeys:
    case Command::kDeleteKey:
    case Command::kQueueLen:
    case Command::kOnClose:
    case Command::kOnSilence:
      reply::integer(o, r.integer);
      return;
    case Command::kGet:
    case Command::kCompareSet:
      if (r.values.size() != 1) throw std::invalid_argument("a GET/COMPARE_SET reply has exactly one value");
      reply::value(o, std::string_view(r.values[0]));
      return;
    case Command::kMultiGet:
    case Command::kPeek:
      if (r.values.size() != sent.keys.size())
        throw std::invalid_argument("a MULTI_GET/PEEK reply has one value per requested key");
      for (const auto& v : r.values) reply::value(o, std::string_view(v));
      return;
    case Command::kListKeys:
      reply::list_keys(o, r.values);
      return;
    case Command::kQueuePop: {
      if ((r.integer > 0) != (r.values.size() == 1))
        throw std::invalid_argument("a QUEUE_POP reply has a value exactly when the length is > 0");
      std::string_view v = r.values.empty() ? std::string_view() : std::string_view(r.values[0]);
      reply::queue_pop(o, r.integer, &v);
      return;
    }
    default:
      return;
  }
}

void encode_watch_event(const WatchEvent& e, std::string& out) {
  StringOut o{out};
  reply::watch_event(o, e.type, e.key, std::string_view(e.old_value), std::string_view(e.new_value));
}

namespace {

Limits reply_limits(std::uint64_t max_value_len) {
  Limits l;
  l.max_key_len = max_value_len;
  l.max_value_len = max_value_len;
  return l;
}

template <class Result>
Result need_more(const Reader& r) {
  Result res;
  res.status = ParseStatus::kNeedMore;
  res.need_at_least = r.need();
  return res;
}

template <class Result>
Result failed(const Reader& r) {
  Result res;
  res.status = ParseStatus::kError;
  res.error = r.error();
  return res;
}

}  // namespace

ReplyParseResult parse_reply(Dialect d, const Request& sent, std::span<const std::uint8_t> buf,
                             std::uint64_t max_value_len) {
  ReplyParseResult res;
  if (!opcode_of(d, sent.command) || !has_reply(sent.command)) {
    res.status = ParseStatus::kError;
    res.error = fmt::format("{} has no reply in this dialect", command_name(sent.command));
    return res;
  }
  const Limits limits = reply_limits(max_value_len);
  Reader r(buf, limits);
  Reply& out = res.reply;
  // Views into buf; the bytes are copied only once the whole reply is there, so that a client re-parsing a
  // reply of many large values as it arrives does not copy the values received so far each time.
  std::vector<std::string_view> views;
  auto value = [&](const char* what) {
    std::string_view v;
    if (!r.bytes(v, max_value_len, what)) return false;
    views.push_back(v);
    return true;
  };
  bool ok = true;
  switch (sent.command) {
    case Command::kCheck:
    case Command::kWait:
    case Command::kBarrier:
    case Command::kCancelWait:
    case Command::kWatchKey:
      ok = r.u8(out.u8);
      if (ok && out.u8 > 3)
        ok = r.fail(fmt::format("{} reply {} is not a known response", command_name(sent.command), out.u8));
      break;
    case Command::kPing:
    case Command::kMultiplex:
      ok = r.u32(out.u32);
      break;
    case Command::kAdd:
    case Command::kGetNumKeys:
    case Command::kDeleteKey:
    case Command::kQueueLen:
    case Command::kOnClose:
    case Command::kOnSilence:
      ok = r.i64(out.integer);
      break;
    case Command::kGet:
    case Command::kCompareSet:
      ok = value("value");
      break;
    case Command::kMultiGet:
    case Command::kPeek:
      for (std::size_t i = 0; ok && i < sent.keys.size(); ++i) ok = value("value");
      break;
    case Command::kListKeys:
      ok = r.i64(out.integer);
      if (ok && out.integer < 0) ok = r.fail(fmt::format("LIST_KEYS count {} is negative", out.integer));
      for (std::int64_t i = 0; ok && i < out.integer; ++i) ok = value("key");
      break;
    case Command::kQueuePop:
      ok = r.i64(out.integer);
      if (ok && out.integer < 0) ok = r.fail(fmt::format("QUEUE_POP length {} is negative", out.integer));
      if (ok && out.integer > 0) ok = value("value");
      break;
    default:
      break;
  }
  if (!ok) return r.failed() ? failed<ReplyParseResult>(r) : need_more<ReplyParseResult>(r);
  out.values.assign(views.begin(), views.end());
  res.status = ParseStatus::kOk;
  res.consumed = r.pos();
  return res;
}

ParseResult parse_tagged_request(std::span<const std::uint8_t> buf, const Limits& limits, std::uint64_t& tag) {
  constexpr std::size_t kTag = sizeof(std::uint64_t);
  if (buf.size() < kTag) {
    ParseResult res;
    res.need_at_least = kTag + 1;
    return res;
  }
  ParseResult res = parse_request(Dialect::kV2, buf.subspan(kTag), limits);
  if (res.status == ParseStatus::kOk) {
    tag = get_u64(buf.data());
    res.consumed += kTag;
  } else if (res.status == ParseStatus::kNeedMore) {
    res.need_at_least = res.need_at_least > SIZE_MAX - kTag ? SIZE_MAX : res.need_at_least + kTag;
  }
  return res;
}

void encode_tagged_request(std::uint64_t tag, const Request& r, std::string& out) {
  put_u64(out, tag);
  encode_request(Dialect::kV2, r, out);
}

TaggedReplyParseResult parse_tagged_reply(std::span<const std::uint8_t> buf, const SentLookup& sent,
                                          std::uint64_t max_value_len) {
  constexpr std::size_t kHeader = sizeof(std::uint64_t) + 1;
  TaggedReplyParseResult res;
  if (buf.size() < kHeader) {
    res.need_at_least = kHeader;
    return res;
  }
  res.tag = get_u64(buf.data());
  const std::uint8_t status = buf[sizeof(std::uint64_t)];
  auto error = [&](std::string why) {
    res.status = ParseStatus::kError;
    res.error = std::move(why);
    return res;
  };
  const auto body = buf.subspan(kHeader);
  if (status == static_cast<std::uint8_t>(FrameStatus::kRefused)) {
    res.frame = FrameStatus::kRefused;
    Limits limits = reply_limits(kMaxRefusalLen);
    Reader r(body, limits);
    std::string_view why;
    if (!r.bytes(why, kMaxRefusalLen, "refusal")) {
      if (r.failed()) return error(r.error());
      res.need_at_least = kHeader + r.need();
      return res;
    }
    res.refusal.assign(why);
    res.status = ParseStatus::kOk;
    res.consumed = kHeader + r.pos();
    return res;
  }
  if (status != static_cast<std::uint8_t>(FrameStatus::kReply))
    return error(fmt::format("tagged frame {} has the unknown status {}", res.tag, status));
  const Request* request = sent(res.tag);
  if (!request) return error(fmt::format("a tagged frame names tag {}, which no request carries", res.tag));
  auto inner = parse_reply(Dialect::kV2, *request, body, max_value_len);
  if (inner.status == ParseStatus::kError) return error(std::move(inner.error));
  if (inner.status == ParseStatus::kNeedMore) {
    res.need_at_least = kHeader + inner.need_at_least;
    return res;
  }
  res.reply = std::move(inner.reply);
  res.status = ParseStatus::kOk;
  res.consumed = kHeader + inner.consumed;
  return res;
}

WatchEventParseResult parse_watch_event(std::span<const std::uint8_t> buf, std::uint64_t max_value_len) {
  const Limits limits = reply_limits(max_value_len);
  Reader r(buf, limits);
  WatchEventParseResult res;
  std::uint8_t type = 0;
  std::string_view key, old_value, new_value;
  bool ok = r.u8(type);
  if (ok && type > static_cast<std::uint8_t>(WatchResponse::kCallbackRegistered))
    ok = r.fail(fmt::format("watch event type {} is not a known response", type));
  ok = ok && r.bytes(key, max_value_len, "key") && r.bytes(old_value, max_value_len, "old value") &&
       r.bytes(new_value, max_value_len, "new value");
  if (!ok) return r.failed() ? failed<WatchEventParseResult>(r) : need_more<WatchEventParseResult>(r);
  res.status = ParseStatus::kOk;
  res.consumed = r.pos();
  res.event = {static_cast<WatchResponse>(type), std::string(key), std::string(old_value), std::string(new_value)};
  return res;
}

std::uint32_t ping_reply(std::uint32_t nonce, std::uint32_t features) {
  if ((nonce & kPingAskFeatures) == 0) return nonce;
  return nonce | (features << kFeatureShift);
}

std::uint32_t announced_features(std::uint32_t nonce, std::uint32_t reply) {
  if ((reply & ((1u << kFeatureShift) - 1)) != nonce) return 0;
  return reply >> kFeatureShift;
}

void encode_refusal(std::string_view reason, std::string& out) {
  put_u32(out, kRefusalMarker);
  put_bytes(out, reason);
}

std::optional<std::string> parse_refusal(std::span<const std::uint8_t> buf) {
  if (buf.size() < 12) return std::nullopt;
  const auto len = std::min<std::uint64_t>(get_u64(buf.data() + 4), 4096);
  if (buf.size() < 12 + len) return std::nullopt;
  return std::string(reinterpret_cast<const char*>(buf.data() + 12), static_cast<std::size_t>(len));
}

void put_u8(std::string& out, std::uint8_t v) { out.push_back(static_cast<char>(v)); }
void put_u32(std::string& out, std::uint32_t v) { put_le(out, v); }
void put_i64(std::string& out, std::int64_t v) { put_le(out, v); }
void put_u64(std::string& out, std::uint64_t v) { put_le(out, v); }
void put_bytes(std::string& out, std::string_view bytes) {
  put_u64(out, bytes.size());
  out.append(bytes.data(), bytes.size());
}

std::uint32_t get_u32(const std::uint8_t* p) {
  std::uint32_t v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
std::uint64_t get_u64(const std::uint8_t* p) {
  std::uint64_t v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
std::int64_t get_i64(const std::uint8_t* p) {
  std::int64_t v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

}  // namespace ctrun::store::protocol
