#include "tests/store/fuzz/codec_fuzz.hpp"

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstring>
#include <span>
#include <string>

#include "store/keyspace.hpp"
#include "store/local_keyspace.hpp"
#include "store/protocol.hpp"
#include "store/server_commands.hpp"

namespace ctrun::store::fuzz {

namespace {

using namespace protocol;

// Says which invariant broke, then traps (libFuzzer and the gtest both report the crash and the input).
#define check(ok)                                                                          \
  do {                                                                                     \
    if (!(ok)) {                                                                           \
      std::fprintf(stderr, "codec fuzz invariant failed at line %d: %s\n", __LINE__, #ok); \
      __builtin_trap();                                                                    \
    }                                                                                      \
  } while (0)

// Three fake connections; replies are collected (and bounded by the small limits below).
class Sink final : public detail::ReplySink {
 public:
  detail::ReplyBuffer* output(detail::ConnId c) override { return c < out.size() ? &out[c] : nullptr; }
  std::array<detail::ReplyBuffer, 3> out;
};

// Applies a request that changes the keyspace to `mirror` through the typed API directly, as MemoryStore
// and FileStore do (a LocalKeyspace); false if the mirror refused it.
bool apply_typed(detail::Keyspace& mirror, const Request& r) {
  using detail::kLocalConn;
  switch (r.command) {
    case Command::kSet:
      return mirror.set(kLocalConn, r.keys[0], r.values[0]).ok();
    case Command::kAppend:
      return mirror.append(kLocalConn, r.keys[0], r.values[0]).ok();
    case Command::kCompareSet: {
      auto res = mirror.compare_set(kLocalConn, r.keys[0], r.values[0], r.values[1]);
      // The result is what the key holds now, or the caller's expected value when it is missing.
      auto now = mirror.value(r.keys[0]);
      check(res.ok() && res.value && (now ? res.value->bytes == *now : res.value->bytes == r.values[0]));
      return true;
    }
    case Command::kAdd:
      return mirror.add(kLocalConn, r.keys[0], r.integer).ok();
    case Command::kDeleteKey:
      mirror.delete_key(r.keys[0]);
      return true;
    case Command::kMultiSet:
      try {
        detail::run_multi_set(mirror, r.keys, r.values);
        return true;
      } catch (const StoreError&) {
        return false;
      }
    case Command::kQueuePush:
      return mirror.queue_push(kLocalConn, r.keys[0], r.values[0]).ok();
    case Command::kQueuePop: {
      auto res = mirror.queue_pop(kLocalConn, r.keys[0]);
      check(res.ok() && (res.length > 0) == static_cast<bool>(res.value));
      return true;
    }
    case Command::kBarrier:
      return mirror.barrier(kLocalConn, r.keys[0], r.integer, false).ok();
    default:
      return true;  // reads: nothing to apply
  }
}

// ctrun's tagged mode (MULTIPLEX): the stream as tagged requests, and what follows each as the frame of its reply.
void fuzz_tagged(std::span<const std::uint8_t> stream, const Limits& limits) {
  std::size_t off = 0;
  for (int n = 0; off < stream.size() && n < 256; ++n) {
    auto rest = stream.subspan(off);
    std::uint64_t tag = 0;
    auto r = parse_tagged_request(rest, limits, tag);
    if (r.status == ParseStatus::kError) {
      check(!r.error.empty());
      return;
    }
    if (r.status == ParseStatus::kNeedMore) {
      check(r.need_at_least > rest.size());
      return;
    }
    std::string again;
    encode_tagged_request(tag, r.request, again);
    check(again.size() == r.consumed && std::memcmp(again.data(), rest.data(), again.size()) == 0);
    auto after = rest.subspan(r.consumed);
    const SentLookup sent = [&](std::uint64_t t) { return t == tag ? &r.request : nullptr; };
    auto f = parse_tagged_reply(after, sent, limits.max_value_len);
    if (f.status == ParseStatus::kOk) {
      std::string enc;
      StringOut out{enc};
      if (f.frame == FrameStatus::kRefused) {
        reply::refused_frame(out, f.tag, f.refusal);
      } else {
        reply::frame(out, f.tag, FrameStatus::kReply);
        if (has_reply(r.request.command)) encode_reply(Dialect::kV2, r.request, f.reply, enc);
      }
      check(enc.size() == f.consumed && std::memcmp(enc.data(), after.data(), enc.size()) == 0);
    } else if (f.status == ParseStatus::kNeedMore) {
      check(f.need_at_least > after.size());
    } else {
      check(!f.error.empty());
    }
    off += r.consumed;
  }
}

}  // namespace

void codec_fuzz_one(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return;
  // A mode byte of 0xA0-0xAF: the stream is tagged frames (1 input in 16).
  if ((data[0] & 0xF0) == 0xA0) return fuzz_tagged(std::span<const std::uint8_t>(data + 1, size - 1), Limits{});
  // Byte 0 picks the limits and the dialect (or lets detect_dialect pick it from the stream, as the server
  // does); the rest is a client->server byte stream.
  const std::uint8_t mode = data[0];
  std::span<const std::uint8_t> stream(data + 1, size - 1);
  Limits limits;
  if (mode & 4) {
    limits.max_key_len = 16;
    limits.max_value_len = 64;
    limits.max_keys_per_request = 4;
    limits.max_request_bytes = 512;
  }
  Dialect dialect = (mode & 1) ? Dialect::kV2 : Dialect::kLegacy;
  if (mode & 2) {
    auto d = detect_dialect(stream);
    if (d == Detected::kNeedMore) {
      check(stream.size() < 5);
      return;
    }
    dialect = d == Detected::kV2 ? Dialect::kV2 : Dialect::kLegacy;
    if (d == Detected::kV2) check(stream.size() >= 5 && stream[0] == 0);
  }

  Sink sink;
  detail::Keyspace keyspace(sink, 1 << 20);
  // The same commands through the typed API, without limits or replies: while the server path accepts every
  // request, both keyspaces must hold the same values (one semantics, two callers).
  detail::LocalKeyspace local;
  detail::Keyspace& mirror = local.keyspace();
  bool mirrored = true;
  std::size_t off = 0;
  for (int n = 0; off < stream.size() && n < 256; ++n) {
    auto rest = stream.subspan(off);
    auto r = parse_request(dialect, rest, limits);
    if (r.status == ParseStatus::kError) {
      check(!r.error.empty());
      return;
    }
    if (r.status == ParseStatus::kNeedMore) {
      check(r.need_at_least > rest.size());
      return;
    }
    check(r.consumed > 0 && r.consumed <= rest.size());
    // Canonical encoding: re-encoding the decoded request gives back exactly the bytes consumed.
    std::string again;
    encode_request(dialect, r.request, again);
    check(again.size() == r.consumed && std::memcmp(again.data(), rest.data(), again.size()) == 0);
    // No proper prefix of a whole request is a whole request.
    if (r.consumed > 1) {
      auto cut = parse_request(dialect, rest.first(r.consumed / 2), limits);
      check(cut.status != ParseStatus::kOk);
    }
    // The reply half of the codec: the bytes after this request, read as its reply, either need more, fail
    // with a reason, or decode to a reply whose encoding is exactly the bytes consumed.
    if (has_reply(r.request.command) && r.request.keys.size() <= 64) {
      auto after = rest.subspan(r.consumed);
      auto pr = parse_reply(dialect, r.request, after, limits.max_value_len);
      if (pr.status == ParseStatus::kOk) {
        std::string enc;
        encode_reply(dialect, r.request, pr.reply, enc);
        check(enc.size() == pr.consumed && std::memcmp(enc.data(), after.data(), enc.size()) == 0);
      } else if (pr.status == ParseStatus::kNeedMore) {
        check(pr.need_at_least > after.size());
      } else {
        check(!pr.error.empty());
      }
    }
    // Semantics: execute as one of three connections; sometimes one disconnects.
    const detail::ConnId conn = static_cast<detail::ConnId>(off % 3);
    auto res = detail::execute(keyspace, sink, conn, r.request);
    for (int slices = 0; res.more && slices < 1000; ++slices) res = detail::step(keyspace, sink, conn, r.request);
    check(!res.more);
    if (res.close) mirrored = false;  // refused by a limit the mirror does not have, or a closing GET
    if (mirrored && r.request.command != Command::kValidate) {
      if (!apply_typed(mirror, r.request)) {
        mirrored = false;
      } else {
        for (const auto& k : r.request.keys) {
          check(mirror.value(k) == keyspace.value(k));
          check(mirror.queue_len(k) == keyspace.queue_len(k));
        }
        check(mirror.num_keys() == keyspace.num_keys());
      }
    }
    while (keyspace.cleanup_step()) {
    }
    check(keyspace.pending_waits() <= 3);
    if ((off & 0x3f) == 0x3f) keyspace.forget(conn);
    for (auto& o : sink.out)
      if (o.size() > (4u << 20)) o.clear();
    check(keyspace.held_bytes() <= (1u << 20) + (16u << 20));
    off += r.consumed;
  }
  keyspace.clear();
  check(keyspace.pending_waits() == 0 && keyspace.num_keys() == 0 && keyspace.bytes() == 0);
  // Values still referenced by unread replies are counted until those replies are gone.
  for (auto& o : sink.out) o.clear();
  keyspace.forget(0);
  keyspace.forget(1);
  keyspace.forget(2);
  check(keyspace.held_bytes() == 0);
}

}  // namespace ctrun::store::fuzz
