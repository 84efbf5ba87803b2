#pragma once
// The TCPStore wire codec: PyTorch's two dialects as pure functions over bytes (no sockets), so the
// server, the client, the replay tests and the fuzzer share one implementation.
//
// Dialects: kLegacy (torch <= 2.0, no handshake, SET=0 ... WATCH_KEY=7, DELETE_KEY=8) and kV2 (torch >= 2.1,
// first message VALIDATE + magic 0x3C85F7CE, VALIDATE=0, SET=1 ... BARRIER=18). Little-endian; bytes fields
// are u64 length + raw bytes; no framing. See docs/protocol.md.

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace ctrun::store::protocol {

inline constexpr std::uint32_t kValidationMagic = 0x3C85F7CE;

enum class Dialect : std::uint8_t { kLegacy, kV2 };

// Dialect-independent command names. Opcodes differ per dialect (see opcode_of / command_of).
enum class Command : std::uint8_t {
  kValidate,
  kSet,
  kCompareSet,
  kGet,
  kAdd,
  kCheck,
  kWait,
  kGetNumKeys,
  kWatchKey,  // legacy only, on 1.13's callback connection
  kDeleteKey,
  kAppend,
  kMultiGet,
  kMultiSet,
  kCancelWait,
  kPing,
  kQueuePush,
  kQueuePop,
  kQueueLen,
  kListKeys,
  kBarrier,
  // ctrun's extension (ctstore only; v2 dialect, opcode kOnCloseOpcode far above torch's): while the requesting
  // connection lives nothing happens; when it closes, the server APPENDs the value to the key (creating it, waking
  // its waiters). integer 1 registers (replacing an earlier registration of the key), 0 cancels. A torch server
  // closes the connection on the unknown opcode, which is how a client learns it has no such thing.
  kOnClose,
  // ctrun's tagged mode (ctstore and the agent's store only; v2 dialect, opcode kMultiplexOpcode; announced as
  // kFeatureMultiplex): u32 version asked, u32 version granted. From the next request on, the connection carries
  // tagged frames (see "Tagged mode" below): a relay's many clients, or an agent's many callers (MuxStore), over one
  // connection, a pending WAIT no longer blocking later replies.
  kMultiplex,
  // ctrun's ON_SILENCE (announced as kFeatureOnSilence): keys[0], values[0] (appended when the connection has sent
  // nothing for `integer` ms), values[1] (appended when it speaks again after that; the registration then re-arms);
  // integer 0 cancels. Replies the registrations the connection holds (i64). A connection whose silence fired does
  // not fire its ON_CLOSE on the same key as well (one loss, not two).
  kOnSilence,
  // ctrun's PEEK (announced as kFeaturePeek): keys, values[0] (the absent marker S). Replies one value per key, as
  // MULTI_GET: the key's value, or S where it is missing. What a COMPARE_SET(key, S, S) per key answers (store.hpp:
  // Store::peek), in one request: a rendezvous step reads the few keys it needs, present or not, as one.
  kPeek,
};
inline constexpr Command kLastCommand = Command::kPeek;
// ctrun's extensions: v2 only, far above torch's opcodes (a future torch adding 19, 20, ... cannot collide).
inline constexpr std::uint8_t kOnCloseOpcode = 0xC7;
inline constexpr std::uint8_t kMultiplexOpcode = 0xC8;
inline constexpr std::uint8_t kOnSilenceOpcode = 0xC9;
inline constexpr std::uint8_t kPeekOpcode = 0xCA;
// The most keys one PEEK may name: a rendezvous step reads a handful; anything bigger is a MULTI_GET's job.
inline constexpr std::uint64_t kMaxPeekKeys = 1024;
inline constexpr std::uint32_t kMultiplexVersion = 1;

// ctrun's extensions are announced, never probed: a ctrun client sets kPingAskFeatures in its PING nonce (a pid
// never has that bit: pids are below 2^22), and a ctrun server answers nonce | features << kFeatureShift where
// torch's servers echo the nonce unchanged (and torch's clients, which never set the bit, get an exact echo).
inline constexpr std::uint32_t kPingAskFeatures = 1u << 22;
inline constexpr int kFeatureShift = 24;
inline constexpr std::uint32_t kFeatureOnClose = 1;    // ON_CLOSE
inline constexpr std::uint32_t kFeatureMultiplex = 2;  // MULTIPLEX (tagged mode, kMultiplexVersion)
inline constexpr std::uint32_t kFeatureOnSilence = 4;  // ON_SILENCE
inline constexpr std::uint32_t kFeaturePeek = 8;       // PEEK
inline constexpr std::uint32_t kServerFeatures = kFeatureOnClose | kFeatureMultiplex | kFeatureOnSilence | kFeaturePeek;
// The PING reply of a server to `nonce`; the features a reply announces (0 for an exact echo).
std::uint32_t ping_reply(std::uint32_t nonce, std::uint32_t features);
std::uint32_t announced_features(std::uint32_t nonce, std::uint32_t reply);

// A server that cannot take one more connection (its --max-connections or descriptors are used up) accepts it,
// writes kRefusalMarker then the reason (u64 length + text) in place of any reply, and closes it. A ctrun client
// reads the marker where it expects the PING reply (no nonce has the top byte set) or MULTIPLEX's version, and
// reports the reason instead of retrying; torch's clients see a broken handshake.
inline constexpr std::uint32_t kRefusalMarker = 0xFFFFFFFFu;
void encode_refusal(std::string_view reason, std::string& out);
// After the marker (4 bytes) at the front of buf: the reason once it is all there; nullopt while incomplete.
std::optional<std::string> parse_refusal(std::span<const std::uint8_t> buf);

const char* command_name(Command c);

// nullopt if the opcode does not exist in the dialect.
std::optional<Command> command_of(Dialect d, std::uint8_t opcode);
// nullopt if the command does not exist in the dialect (e.g. APPEND in legacy).
std::optional<std::uint8_t> opcode_of(Dialect d, Command c);

enum class CheckResponse : std::uint8_t { kReady = 0, kNotReady = 1 };
enum class WaitResponse : std::uint8_t { kStopWaiting = 0, kWaitCanceled = 1 };
enum class WatchResponse : std::uint8_t { kKeyUpdated = 0, kKeyCreated = 1, kKeyDeleted = 2, kCallbackRegistered = 3 };

// A decoded request. Which fields are used depends on the command:
//   SET/APPEND/QUEUE_PUSH: keys[0], values[0]     COMPARE_SET: keys[0], values[0]=expected, values[1]=desired
//   GET/DELETE_KEY/WATCH_KEY/QUEUE_POP/QUEUE_LEN: keys[0]     ADD: keys[0], integer=delta
//   CHECK/WAIT/MULTI_GET: keys     MULTI_SET: keys, values     VALIDATE/PING: u32 (magic / nonce)
//   BARRIER: keys[0], integer=world_size     GETNUMKEYS/CANCEL_WAIT/LIST_KEYS: nothing
//   ON_CLOSE: keys[0], values[0], integer=1 (register) or 0 (cancel)     MULTIPLEX: u32 (version)
//   ON_SILENCE: keys[0], values[0] (silent), values[1] (back), integer=timeout ms (0: cancel)
//   PEEK: keys, values[0] (the absent marker)
struct Request {
  Command command{};
  std::vector<std::string> keys;
  std::vector<std::string> values;
  std::int64_t integer = 0;
  std::uint32_t u32 = 0;
};

// Limits a server enforces while decoding, before allocating (defaults as PyTorch's libuv server).
struct Limits {
  std::uint64_t max_key_len = 8 * 1024;
  std::uint64_t max_value_len = 8 * 1024 * 1024;
  std::uint64_t max_keys_per_request = 128 * 1024;
  // Upper bound on one whole request (a MULTI_SET of many large values): a server buffers a request until it
  // is complete, so this bounds per-connection input memory. Not a PyTorch limit; generous on purpose.
  std::uint64_t max_request_bytes = 256ull * 1024 * 1024;
};

// ---- dialect detection (server side, on a connection's first bytes) ----
enum class Detected : std::uint8_t { kNeedMore, kLegacy, kV2 };
// First byte != 0 -> legacy at once. First byte 0: v2 iff the next 4 bytes are the magic; needs 5 bytes then.
// Never waits for more than it needs (a legacy client may open with a 1-byte GETNUMKEYS).
Detected detect_dialect(std::span<const std::uint8_t> first_bytes);

// ---- request decoding (server side) ----
enum class ParseStatus : std::uint8_t { kNeedMore, kOk, kError };
struct ParseResult {
  ParseStatus status = ParseStatus::kNeedMore;
  std::size_t consumed = 0;  // bytes of one whole request when kOk
  Request request;           // when kOk
  std::string error;         // when kError: why (unknown opcode, limit exceeded, ...)
  // When kNeedMore: the buffer must hold at least this many bytes before another call can make progress
  // (lets a server skip re-parsing a 1 MiB value on every 64 KiB read). Always > buf.size().
  std::size_t need_at_least = 0;
};
// Decodes at most one request from the front of buf. Incremental: kNeedMore until a whole request is there.
// Length fields are checked against limits before anything is allocated or waited for.
ParseResult parse_request(Dialect d, std::span<const std::uint8_t> buf, const Limits& limits);

// ---- request encoding (client side) ----
// Appends the encoded request to out. Throws std::invalid_argument if the command is not in the dialect.
void encode_request(Dialect d, const Request& r, std::string& out);

// ---- replies (both dialects: the shapes are the same, only the set of commands differs) ----
// A decoded reply to a request of `command` (the client knows what it sent):
//   SET/APPEND/MULTI_SET/QUEUE_PUSH/VALIDATE: no reply      PING: u32 (the nonce echoed)    MULTIPLEX: u32 (version)
//   CHECK: u8 (CheckResponse)     WAIT/BARRIER/CANCEL_WAIT: u8 (WaitResponse)     WATCH_KEY: u8 (WatchResponse)
//   ADD/GETNUMKEYS/DELETE_KEY/QUEUE_LEN/ON_CLOSE/ON_SILENCE: integer (i64; ON_CLOSE: registrations the connection
//   holds) GET/COMPARE_SET: values[0] (u64 length + bytes) MULTI_GET: values (one per requested key, no count)
//   LIST_KEYS: i64 count, then values QUEUE_POP: integer = the queue's length, then values[0] only when it was > 0
// A WAIT or BARRIER reply may come much later (STOP_WAITING when the keys are there); a CANCEL_WAIT may be
// preceded by that STOP_WAITING (the client reads two u8 then).
struct Reply {
  std::uint8_t u8 = 0;
  std::uint32_t u32 = 0;
  std::int64_t integer = 0;
  std::vector<std::string> values;
  bool operator==(const Reply&) const = default;
};
// True if the command has a reply at all.
bool has_reply(Command c);

// 1.13's watch event on a WATCH_KEY connection, sent when a watched key changes (TCPStoreMasterDaemon::
// sendKeyUpdatesToClients): u8 WatchResponse, key, old value, new value (empty for a created/deleted side).
struct WatchEvent {
  WatchResponse type{};
  std::string key, old_value, new_value;
  bool operator==(const WatchEvent&) const = default;
};

// Reply encoders, generic over the output: anything with u8(v), u32(v), i64(v), bytes(string_view) and
// value(V) for the value type V used. The server passes its ReplyBuffer (values shared by reference count,
// written with gather I/O); StringOut below writes into a std::string (tests, the fuzzer, encode_reply).
namespace reply {
template <class Out>
void check(Out& out, bool ready) {
  out.u8(static_cast<std::uint8_t>(ready ? CheckResponse::kReady : CheckResponse::kNotReady));
}
template <class Out>
void stop_waiting(Out& out) {  // WAIT, BARRIER (at once or deferred)
  out.u8(static_cast<std::uint8_t>(WaitResponse::kStopWaiting));
}
template <class Out>
void wait_canceled(Out& out) {
  out.u8(static_cast<std::uint8_t>(WaitResponse::kWaitCanceled));
}
template <class Out>
void watch_registered(Out& out) {
  out.u8(static_cast<std::uint8_t>(WatchResponse::kCallbackRegistered));
}
template <class Out>
void integer(Out& out, std::int64_t v) {  // ADD, GETNUMKEYS, DELETE_KEY (0/1), QUEUE_LEN
  out.i64(v);
}
template <class Out>
void ping(Out& out, std::uint32_t nonce) {
  out.u32(nonce);
}
template <class Out, class V>
void value(Out& out, const V& v) {  // GET, COMPARE_SET; also one element of MULTI_GET
  out.value(v);
}
template <class Out, class V>
void queue_pop(Out& out, std::int64_t length, const V* v) {
  out.i64(length);
  if (length > 0 && v) out.value(*v);
}
template <class Out, class Keys>
void list_keys(Out& out, const Keys& keys) {
  out.i64(static_cast<std::int64_t>(keys.size()));
  for (const auto& k : keys) out.bytes(k);
}
template <class Out, class V>
void watch_event(Out& out, WatchResponse type, std::string_view key, const V& old_value, const V& new_value) {
  out.u8(static_cast<std::uint8_t>(type));
  out.bytes(key);
  out.value(old_value);
  out.value(new_value);
}
}  // namespace reply

// A std::string as a reply output.
struct StringOut {
  std::string& s;
  void u8(std::uint8_t v);
  void u32(std::uint32_t v);
  void i64(std::int64_t v);
  void u64(std::uint64_t v);
  void bytes(std::string_view b);
  void value(std::string_view b) { bytes(b); }
};

// Encodes a whole Reply to a request (tests, tools); throws std::invalid_argument if the command is not in
// the dialect or has no reply.
void encode_reply(Dialect d, const Request& sent, const Reply& r, std::string& out);
void encode_watch_event(const WatchEvent& e, std::string& out);

// ---- reply decoding (client side) ----
struct ReplyParseResult {
  ParseStatus status = ParseStatus::kNeedMore;
  std::size_t consumed = 0;       // when kOk
  Reply reply;                    // when kOk
  std::string error;              // when kError (a length over max_value_len, a negative count, ...)
  std::size_t need_at_least = 0;  // when kNeedMore, as ParseResult's
};
// Decodes the reply to `sent` from the front of buf. Incremental: kNeedMore until the whole reply is there.
// Lengths are checked against max_value_len before anything is allocated. For WAIT/BARRIER/CANCEL_WAIT it
// decodes one u8.
ReplyParseResult parse_reply(Dialect d, const Request& sent, std::span<const std::uint8_t> buf,
                             std::uint64_t max_value_len);
struct WatchEventParseResult {
  ParseStatus status = ParseStatus::kNeedMore;
  std::size_t consumed = 0;
  WatchEvent event;
  std::string error;
  std::size_t need_at_least = 0;
};
WatchEventParseResult parse_watch_event(std::span<const std::uint8_t> buf, std::uint64_t max_value_len);

// ---- tagged mode (ctrun's MULTIPLEX extension; docs/protocol.md "Tagged mode") ----
// After MULTIPLEX, every request is `u64 tag` + a v2 request, and the server answers each request that has a
// reply with a frame `u64 tag, u8 FrameStatus` + the reply, in any order: a WAIT (or BARRIER) is answered when its
// keys are there, while later requests are answered at once. Tags are the client's; a WAIT's is its name for
// CANCEL_WAIT, which names the wait to cancel by carrying its tag (answered under that tag: the STOP_WAITING first
// if it was already sent, then WAIT_CANCELED). A request the server refuses (GET of a missing key, an ADD on a
// non-number, a memory limit) is answered with a kRefused frame carrying the reason, replied or not, and the
// connection goes on: a relay then closes only the client that sent it. A frame that cannot be decoded closes the
// connection (there is no way to find the next one).
enum class FrameStatus : std::uint8_t { kReply = 0, kRefused = 1 };
inline constexpr std::uint64_t kMaxRefusalLen = 4096;  // a refusal's reason is cut to this

// The tag, then one v2 request (the limits apply to the request; the tag is not counted).
ParseResult parse_tagged_request(std::span<const std::uint8_t> buf, const Limits& limits, std::uint64_t& tag);
void encode_tagged_request(std::uint64_t tag, const Request& r, std::string& out);

namespace reply {
template <class Out>
void frame(Out& out, std::uint64_t tag, FrameStatus status) {  // then the reply (kReply) or the reason (kRefused)
  out.u64(tag);
  out.u8(static_cast<std::uint8_t>(status));
}
template <class Out>
void refused_frame(Out& out, std::uint64_t tag, std::string_view reason) {
  frame(out, tag, FrameStatus::kRefused);
  out.bytes(reason.substr(0, kMaxRefusalLen));
}
}  // namespace reply

struct TaggedReplyParseResult {
  ParseStatus status = ParseStatus::kNeedMore;
  std::size_t consumed = 0;  // when kOk
  std::uint64_t tag = 0;
  FrameStatus frame = FrameStatus::kReply;
  Reply reply;          // kReply
  std::string refusal;  // kRefused: why
  std::string error;    // when kError (an unknown tag, a bad status, a reply that does not decode)
  std::size_t need_at_least = 0;
};
// Decodes one frame from the front of buf. `sent(tag)` is the request the client sent under that tag (the reply's
// shape depends on it), or null for a tag it does not know (an error).
using SentLookup = std::function<const Request*(std::uint64_t tag)>;
TaggedReplyParseResult parse_tagged_reply(std::span<const std::uint8_t> buf, const SentLookup& sent,
                                          std::uint64_t max_value_len);

// ---- primitive appenders (request encoding) ----
void put_u8(std::string& out, std::uint8_t v);
void put_u32(std::string& out, std::uint32_t v);
void put_i64(std::string& out, std::int64_t v);
void put_u64(std::string& out, std::uint64_t v);
void put_bytes(std::string& out, std::string_view bytes);  // u64 length + bytes

// ---- primitive readers (client side, over an exactly-sized buffer) ----
std::uint32_t get_u32(const std::uint8_t* p);
std::uint64_t get_u64(const std::uint8_t* p);
std::int64_t get_i64(const std::uint8_t* p);

}  // namespace ctrun::store::protocol
