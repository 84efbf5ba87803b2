#include "store/tcp_store.hpp"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <map>
#include <mutex>
#include <random>
#include <thread>

#include <fmt/format.h>

#include "common/auth/handshake.hpp"
#include "common/log.hpp"
#include "store/store_util.hpp"
#include "store/tcp_socket.hpp"

namespace ctrun::store {
namespace {

using protocol::Command;
using protocol::Dialect;
using protocol::Request;
using TimePoint = Clock::time_point;

// Replies larger than this are treated as a corrupt stream rather than allocated (our server caps values at
// 8 MiB by default; torch's legacy server has no cap, so stay generous).
constexpr std::uint64_t kMaxReplyBytes = 4ull << 30;
constexpr std::size_t kReadChunk = 64 * 1024;
// What a WAIT, BARRIER or CANCEL_WAIT reply (one u8) is parsed as.
const protocol::Request kWaitSent{.command = protocol::Command::kWait};

std::string errno_text(int err) { return std::strerror(err); }

TimePoint after(Duration d) { return deadline_after(d); }

// A read "deadline" meaning: block in recv, bounded by the socket's SO_RCVTIMEO (the store timeout).
constexpr TimePoint kSocketTimeout = TimePoint::min();

// How long a dialect probe waits for an answer before trying the other dialect.
constexpr auto kDetectTimeout = std::chrono::seconds(3);

}  // namespace

class TcpStore::Impl {
 public:
  explicit Impl(TcpStoreOptions o)
      : options_(std::move(o)),
        dialect_(options_.dialect.value_or(Dialect::kV2)),
        detect_(!options_.dialect.has_value()),
        timeout_ms_(options_.timeout.count()),
        endpoint_(format_endpoint(options_.host, options_.port)),
        rbuf_(kReadChunk) {
    std::lock_guard lock(mutex_);
    connect_locked();
    if (options_.add_init_key) {
      // Like torch's TCPStore(world_size=N): counts clients on the unprefixed "init/" key. Only on the first
      // connection: a transparent reconnect must not count this client twice.
      set_context(Command::kAdd, "init/");
      Request r{.command = Command::kAdd, .keys = {"init/"}, .integer = 1};
      exchange(r);
    }
  }

  ~Impl() { close_socket(); }

  const TcpStoreOptions& options() const { return options_; }
  Duration timeout() const { return Duration(timeout_ms_.load(std::memory_order_relaxed)); }
  void set_timeout(Duration t) { timeout_ms_.store(t.count(), std::memory_order_relaxed); }
  void set_connect_timeout(Duration t) {
    std::lock_guard lock(mutex_);
    options_.connect_timeout = t;
  }
  bool is_v2() const { return dialect_ == Dialect::kV2; }
  Dialect dialect() const { return dialect_; }

  void set(const std::string& key, std::string_view value) {
    std::lock_guard lock(mutex_);
    set_locked(key, value);
  }

  std::string get(const std::string& key) {
    std::lock_guard lock(mutex_);
    return get_locked(key);
  }

  std::string compare_set(const std::string& key, std::string_view expected, std::string_view desired) {
    std::lock_guard lock(mutex_);
    return compare_set_locked(key, expected, desired);
  }

  std::int64_t add(const std::string& key, std::int64_t delta) {
    std::lock_guard lock(mutex_);
    return add_locked(key, delta);
  }

  bool check(const std::vector<std::string>& keys) {
    std::lock_guard lock(mutex_);
    begin(Command::kCheck, keys.empty() ? std::string() : keys.front());
    auto r = exchange({.command = Command::kCheck, .keys = wire_keys(keys)}).u8;
    if (r > 1) protocol_error(fmt::format("CHECK reply {} is neither READY (0) nor NOT_READY (1)", r));
    return r == static_cast<std::uint8_t>(protocol::CheckResponse::kReady);
  }

  void wait(const std::vector<std::string>& keys, Duration timeout) {
    std::lock_guard lock(mutex_);
    wait_locked(keys, timeout);
  }

  std::int64_t num_keys() {
    std::lock_guard lock(mutex_);
    begin(Command::kGetNumKeys, {});
    return exchange({.command = Command::kGetNumKeys}).integer;
  }

  bool delete_key(const std::string& key) {
    std::lock_guard lock(mutex_);
    begin(Command::kDeleteKey, key);
    return exchange({.command = Command::kDeleteKey, .keys = {wire_key(key)}}).integer == 1;
  }

  void append(const std::string& key, std::string_view value) {
    std::lock_guard lock(mutex_);
    if (!is_v2()) {
      append_legacy_locked(key, value);
      return;
    }
    begin(Command::kAppend, key);
    send_request({.command = Command::kAppend, .keys = {wire_key(key)}, .values = {std::string(value)}});
  }

  std::vector<std::string> multi_get(const std::vector<std::string>& keys) {
    std::lock_guard lock(mutex_);
    if (!is_v2()) {
      std::vector<std::string> out;
      out.reserve(keys.size());
      for (const auto& k : keys) out.push_back(get_locked(k));
      return out;
    }
    // As torch: wait for every key first, so that MULTI_GET never hits a missing key (which makes torch's
    // legacy backend close the connection).
    wait_locked(keys, timeout());
    begin(Command::kMultiGet, keys.empty() ? std::string() : keys.front());
    return std::move(exchange({.command = Command::kMultiGet, .keys = wire_keys(keys)}).values);
  }

  void multi_set(const std::vector<std::string>& keys, const std::vector<std::string>& values) {
    check_multi_set_sizes(keys, values);
    std::lock_guard lock(mutex_);
    if (!is_v2()) {
      for (std::size_t i = 0; i < keys.size(); ++i) set_locked(keys[i], values[i]);
      return;
    }
    begin(Command::kMultiSet, keys.empty() ? std::string() : keys.front());
    send_request({.command = Command::kMultiSet, .keys = wire_keys(keys), .values = values});
  }

  void queue_push(const std::string& key, std::string_view value) {
    std::lock_guard lock(mutex_);
    require_v2(Command::kQueuePush);
    begin(Command::kQueuePush, key);
    send_request({.command = Command::kQueuePush, .keys = {wire_key(key)}, .values = {std::string(value)}});
  }

  std::optional<std::string> queue_pop(const std::string& key, bool block) {
    std::lock_guard lock(mutex_);
    require_v2(Command::kQueuePop);
    // A non-empty queue counts as a present key for WAIT (as torch's libuv server), so blocking is a wait.
    if (block) wait_locked({key}, timeout());
    begin(Command::kQueuePop, key);
    auto reply = exchange({.command = Command::kQueuePop, .keys = {wire_key(key)}});
    if (reply.integer <= 0) return std::nullopt;
    return std::move(reply.values[0]);
  }

  std::int64_t queue_len(const std::string& key) {
    std::lock_guard lock(mutex_);
    require_v2(Command::kQueueLen);
    begin(Command::kQueueLen, key);
    return exchange({.command = Command::kQueueLen, .keys = {wire_key(key)}}).integer;
  }

  std::vector<std::string> list_keys() {
    std::lock_guard lock(mutex_);
    require_v2(Command::kListKeys);
    begin(Command::kListKeys, {});
    auto reply = exchange({.command = Command::kListKeys});
    std::vector<std::string> out;
    const auto& prefix = options_.key_prefix;
    for (auto& k : reply.values) {
      // As torch: keys outside our prefix (e.g. the unprefixed "init/") are not user keys.
      if (k.size() >= prefix.size() && k.compare(0, prefix.size(), prefix) == 0) out.push_back(k.substr(prefix.size()));
    }
    return out;
  }

  void barrier(const std::string& key, std::int64_t world_size, Duration timeout) {
    std::lock_guard lock(mutex_);
    if (!is_v2()) {
      barrier_legacy_locked(key, world_size, timeout);
      return;
    }
    begin(Command::kBarrier, key);
    send_request({.command = Command::kBarrier, .keys = {wire_key(key)}, .integer = world_size});
    if (!await_deferred_reply(timeout)) {
      throw TimeoutError(
          fmt::format("barrier on key '{}' timed out after {} ms waiting for {} participants. Check that every "
                      "participant started and reached the barrier, or raise the timeout.",
                      printable_key(key), timeout.count(), world_size));
    }
  }

  void ping() {
    std::lock_guard lock(mutex_);
    require_v2(Command::kPing);
    begin(Command::kPing, {});
    ping_locked(reply_deadline());
  }

 private:
  // ---- operations shared by several entry points (mutex_ held) ----
  void set_locked(const std::string& key, std::string_view value) {
    begin(Command::kSet, key);
    send_request({.command = Command::kSet, .keys = {wire_key(key)}, .values = {std::string(value)}});
  }

  std::string get_locked(const std::string& key) {
    // As torch: WAIT first, because a GET of a missing key makes torch's legacy server close the connection.
    wait_locked({key}, timeout());
    begin(Command::kGet, key);
    return std::move(exchange({.command = Command::kGet, .keys = {wire_key(key)}}).values[0]);
  }

  std::string compare_set_locked(const std::string& key, std::string_view expected, std::string_view desired) {
    begin(Command::kCompareSet, key);
    return std::move(exchange({.command = Command::kCompareSet,
                               .keys = {wire_key(key)},
                               .values = {std::string(expected), std::string(desired)}})
                         .values[0]);
  }

  std::int64_t add_locked(const std::string& key, std::int64_t delta) {
    begin(Command::kAdd, key);
    return exchange({.command = Command::kAdd, .keys = {wire_key(key)}, .integer = delta}).integer;
  }

  void wait_locked(const std::vector<std::string>& keys, Duration timeout) {
    begin(Command::kWait, keys.empty() ? std::string() : keys.front());
    send_request({.command = Command::kWait, .keys = wire_keys(keys)});
    if (!await_deferred_reply(timeout)) throw TimeoutError(wait_timeout_message(keys, timeout));
  }

  // Reads the reply of a WAIT or BARRIER that the server may defer. Returns true once it arrived (keys present
  // or barrier complete), false on timeout, after which the connection is usable again (v2) or closed (legacy).
  bool await_deferred_reply(Duration timeout) {
    // The common case (get, multi_get: the store timeout) needs no poll: SO_RCVTIMEO already is the timeout.
    if (try_fill(1, timeout == applied_timeout_ ? kSocketTimeout : after(timeout))) {
      expect_stop_waiting(read_reply(kWaitSent, reply_deadline()).u8);
      return true;
    }
    if (!is_v2()) {
      // torch <= 2.0 servers have no CANCEL_WAIT: they keep the registration and would later send a stray 00
      // that desynchronises the stream. Drop the connection (the server forgets waits on disconnect) and
      // reconnect transparently on the next call.
      log::get("store")->debug("wait timed out on legacy TCPStore {}: reconnecting on next use", endpoint_);
      close_socket();
      return false;
    }
    set_context(Command::kCancelWait, current_key_);
    send_request({.command = Command::kCancelWait});
    auto r = read_reply(kWaitSent, reply_deadline()).u8;
    if (r == static_cast<std::uint8_t>(protocol::WaitResponse::kWaitCanceled)) return false;
    // The race torch handles too: the keys appeared between our deadline and the server seeing the cancel, so
    // STOP_WAITING is followed by the WAIT_CANCELED for the cancel. The wait did complete, so report success.
    expect_stop_waiting(r);
    r = read_reply(kWaitSent, reply_deadline()).u8;
    if (r != static_cast<std::uint8_t>(protocol::WaitResponse::kWaitCanceled))
      protocol_error(fmt::format("expected WAIT_CANCELED (1) after STOP_WAITING, got {}", r));
    return true;
  }

  void expect_stop_waiting(std::uint8_t r) {
    if (r != static_cast<std::uint8_t>(protocol::WaitResponse::kStopWaiting))
      protocol_error(fmt::format("expected STOP_WAITING (0), got {}", r));
  }

  void append_legacy_locked(const std::string& key, std::string_view value) {
    if (append_nonce_.empty()) append_nonce_ = append_probe_nonce();
    append_by_compare_set(
        [this](const std::string& k, std::string_view e, std::string_view d) { return compare_set_locked(k, e, d); },
        key, value, append_nonce_);
  }

  void barrier_legacy_locked(const std::string& key, std::int64_t world_size, Duration timeout) {
    barrier_by_add([this](const std::string& k, std::int64_t d) { return add_locked(k, d); }, key, world_size, timeout);
  }

  void require_v2(Command c) {
    if (!is_v2())
      throw StoreError(
          fmt::format("{} is not supported by the legacy TCPStore dialect (torch <= 2.0 servers); "
                      "use the v2 dialect with a server that has it (ctstore, torch >= 2.8)",
                      protocol::command_name(c)));
  }

  void ping_locked(TimePoint deadline) {
    // Bit 23 set: to a legacy server, VALIDATE + this PING read as a SET whose key length is at least 2^48,
    // which it refuses at once (torch 1.13 closes the connection) instead of waiting for the bytes.
    auto nonce = static_cast<std::uint32_t>(::getpid()) | 0x00800000u;
    auto echo = exchange({.command = Command::kPing, .u32 = nonce}, deadline).u32;
    if (echo == protocol::kRefusalMarker) throw_refused(deadline);
    if (auth::is_handshake(&echo, sizeof echo))  // a store with a secret refused this client, which has none
      throw StoreAuthError(auth::client_words(auth::Failure::kSecretRequired, "the store at " + endpoint_));
    if (echo != nonce) protocol_error(fmt::format("PING returned {} instead of the nonce {}", echo, nonce));
  }

  // The server sent protocol::kRefusalMarker where the PING reply belongs: read its reason (u64 length + text) and
  // give up (no retry: the server is full).
  [[noreturn]] void throw_refused(TimePoint deadline) {
    std::string reason = "no reason given";
    try {
      if (try_fill(8, deadline)) {
        const auto len = std::min<std::uint64_t>(
            protocol::get_u64(reinterpret_cast<const std::uint8_t*>(rbuf_.data() + rpos_)), 4096);
        if (try_fill(8 + len, deadline)) reason.assign(rbuf_.data() + rpos_ + 8, len);
      }
    } catch (const StoreError&) {
      // the server closed right after the reason
    }
    close_socket();
    throw RefusedError(fmt::format("the TCPStore at {} refuses connections: {}", endpoint_, reason), reason);
  }

  // The first connection when no dialect was given: v2's PING answered -> v2. The server closed the
  // connection (torch <= 2.0 reads VALIDATE as a SET with an impossible key length and drops the client)
  // -> reconnect in the legacy dialect and check it with GETNUMKEYS (bounded by a few seconds). Either way the answer
  // is kept for every later (re)connection. Failing both, the caller's retry loop tries again from v2.
  void detect_dialect_locked(TimePoint deadline) {
    auto probe_deadline = [&] { return std::min<TimePoint>(deadline, Clock::now() + kDetectTimeout); };
    peer_closed_ = false;
    try {
      ping_locked(deadline);
      detect_ = false;
      return;
    } catch (const RefusedError&) {
      throw;
    } catch (const StoreError& e) {
      close_socket();
      // Only a server that closed the connection on VALIDATE + PING is taken for a legacy one. A slow v2
      // server (a loaded machine) must not be: the v2-only operations would then fail for good.
      if (!peer_closed_) throw;
      log::get("store")->debug("TCPStore {}: no v2 PING reply ({}); trying the legacy dialect", endpoint_, e.what());
    }
    dialect_ = Dialect::kLegacy;
    try {
      open_socket(deadline);
      set_context(Command::kGetNumKeys, {});
      exchange({.command = Command::kGetNumKeys}, probe_deadline());
    } catch (const StoreError&) {
      dialect_ = Dialect::kV2;
      throw;
    }
    detect_ = false;
    log::get("store")->info("TCPStore {} speaks the legacy dialect (torch <= 2.0's server); using it", endpoint_);
  }

  // The job's handshake, before any request on a new connection: a refusal is final (StoreAuthError), a timeout or
  // a lost connection is retried like any failed connect.
  void prove_secret_locked(TimePoint deadline) {
    try {
      auth::prove_to_server(fd_, *options_.secret, auth::Purpose::kStore, deadline, "the store at " + endpoint_);
    } catch (const auth::AuthError& e) {
      if (e.permanent()) throw StoreAuthError(e.what());
      throw StoreError(e.what());
    }
  }

  // ---- connection management ----
  void begin(Command c, std::string_view key) {
    if (fd_ < 0) connect_locked();
    apply_socket_timeouts();
    set_context(c, key);
  }

  void set_context(Command c, std::string_view key) {
    current_command_ = c;
    current_key_.assign(key);
  }

  void connect_locked() {
    auto deadline = after(options_.connect_timeout);
    ConnectBackoff backoff;
    std::string last_error;
    bool reached_server = false;  // the TCP connect worked at least once but the handshake did not
    int attempts = 0;
    for (;;) {
      ++attempts;
      try {
        open_socket(deadline);
        if (options_.secret) prove_secret_locked(deadline);
        set_context(Command::kValidate, {});
        if (is_v2()) {
          // VALIDATE has no reply; the PING proves the server speaks v2 before any real request is sent.
          reached_server = true;
          send_request({.command = Command::kValidate, .u32 = protocol::kValidationMagic});
          set_context(Command::kPing, {});
          if (detect_)
            detect_dialect_locked(deadline);
          else
            ping_locked(deadline);
        }
        apply_socket_timeouts();
        if (attempts > 1) log::get("store")->debug("connected to TCPStore {} after {} attempts", endpoint_, attempts);
        if (connected_once_ && !on_close_.empty()) restore_on_close_locked();
        connected_once_ = true;
        return;
      } catch (const RefusedError&) {
        throw;  // the server said it is full: retrying would only add to its load
      } catch (const StoreAuthError&) {
        close_socket();
        throw;
      } catch (const StoreError& e) {
        close_socket();
        last_error = e.what();
      }
      auto now = Clock::now();
      if (now >= deadline) break;
      std::this_thread::sleep_for(std::min<Clock::duration>(backoff.next(), deadline - now));
    }
    std::string hint =
        "Check that the store server (ctstore, or the agent hosting it) is running and listening "
        "there, that host and port are right, and that no firewall blocks the port";
    if (reached_server && is_v2() && !options_.dialect.has_value())
      hint += "; neither the v2 nor the legacy (torch <= 2.0) dialect was answered";
    else if (reached_server && is_v2())
      hint += "; if the server is torch <= 2.0's TCPStore, use the legacy dialect (it has no VALIDATE/PING)";
    throw StoreError(
        fmt::format("could not connect to the TCPStore at {} within {} ms ({} attempts; last error: "
                    "{}). {}.",
                    endpoint_, options_.connect_timeout.count(), attempts, last_error, hint));
  }

  // One TCP connect to every resolved address in turn, bounded by deadline.
  void open_socket(TimePoint deadline) {
    const int fd = connect_tcp(options_.host, options_.port, deadline);
    // Blocking from now on: replies are read with one recv bounded by SO_RCVTIMEO (apply_socket_timeouts).
    ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
    fd_ = fd;
    applied_timeout_ = Duration(-1);
    rpos_ = rend_ = 0;
  }

  void close_socket() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
    rpos_ = rend_ = 0;
  }

  // ---- I/O with deadlines. Every failure closes the connection (its state is unknown) and throws. ----
  TimePoint reply_deadline() const { return kSocketTimeout; }

  std::string context() const {
    std::string s = protocol::command_name(current_command_);
    if (!current_key_.empty()) s += fmt::format(" '{}'", printable_key(current_key_));
    return s;
  }

  [[noreturn]] void io_error(const std::string& what) {
    close_socket();
    throw StoreError(fmt::format("TCPStore {}: {} during {}", endpoint_, what, context()));
  }

  [[noreturn]] void protocol_error(const std::string& what) {
    io_error(fmt::format("unexpected reply ({}); is this a TCPStore server speaking the {} dialect?", what,
                         is_v2() ? "v2" : "legacy"));
  }

  void send_request(const Request& r) {
    wbuf_.clear();
    protocol::encode_request(dialect_, r, wbuf_);
    send_all(wbuf_);
  }

  // Sends everything before reading any reply. That is safe even for MiB values because both our server and
  // torch's read requests while they write replies, so neither side can block the other. A blocking send
  // bounded by SO_SNDTIMEO (the store timeout): a server that stops reading gives an error, not a hang.
  void send_all(std::string_view data) {
    std::size_t off = 0;
    while (off < data.size()) {
      ssize_t n = ::send(fd_, data.data() + off, data.size() - off, MSG_NOSIGNAL);
      if (n > 0) {
        off += static_cast<std::size_t>(n);
        continue;
      }
      int err = errno;
      if (n < 0 && err == EINTR) continue;
      if (n < 0 && (err == EAGAIN || err == EWOULDBLOCK))
        io_error(fmt::format("the server accepted no data for {} ms: it is hung or unreachable", timeout().count()));
      io_error(fmt::format("send failed ({}): the server closed the connection or exited", errno_text(err)));
    }
  }

  // The store timeout as SO_RCVTIMEO/SO_SNDTIMEO, so that ordinary replies are read with one blocking recv
  // (no poll per request: this is the hot path of every op) yet a dead or hung server cannot block us for
  // longer than the timeout without progress. Re-applied when set_timeout changed it.
  void apply_socket_timeouts() {
    auto t = timeout();
    if (t == applied_timeout_) return;
    // 0 would mean "forever" to the kernel; cap "forever" timeouts at what a timeval holds comfortably.
    auto us = std::clamp<std::int64_t>(std::chrono::duration_cast<std::chrono::microseconds>(t).count(), 1000,
                                       std::int64_t{1} << 50);
    timeval tv{.tv_sec = static_cast<time_t>(us / 1000000), .tv_usec = static_cast<suseconds_t>(us % 1000000)};
    ::setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    ::setsockopt(fd_, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
    applied_timeout_ = t;
  }

  // True once the socket has data (or EOF/error, which the following read reports), false at the deadline.
  bool wait_readable(TimePoint deadline) {
    if (rend_ > rpos_) return true;
    for (;;) {
      pollfd p{.fd = fd_, .events = POLLIN, .revents = 0};
      int rc = ::poll(&p, 1, poll_timeout(deadline));
      if (rc > 0) return true;
      if (rc == 0) return false;
      if (errno != EINTR) io_error(fmt::format("poll failed: {}", errno_text(errno)));
    }
  }

  // One recv into the buffer. deadline == kSocketTimeout: a blocking recv bounded by SO_RCVTIMEO; otherwise
  // poll until deadline first. False if nothing arrived in time; EOF and errors close and throw.
  bool recv_some(TimePoint deadline) {
    if (deadline != kSocketTimeout && !wait_readable(deadline)) return false;
    for (;;) {
      ssize_t got = ::recv(fd_, rbuf_.data() + rend_, rbuf_.size() - rend_, 0);
      if (got > 0) {
        rend_ += static_cast<std::size_t>(got);
        return true;
      }
      if (got == 0 || (got < 0 && errno == ECONNRESET)) peer_closed_ = true;
      if (got == 0)
        io_error(
            "the server closed the connection (it exited, or rejected the request: a GET of a missing key, a "
            "non-numeric ADD, a limit exceeded; see the server's log)");
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) {
        if (deadline == kSocketTimeout) return false;
        continue;  // spurious readiness after poll: poll again
      }
      io_error(fmt::format("recv failed ({}): the server closed the connection or exited", errno_text(errno)));
    }
  }

  // Ensures n unread bytes are buffered. Reads as much as is available so one recv usually takes a whole reply.
  // False if the data did not arrive in time (the connection is left as it is).
  bool try_fill(std::size_t n, TimePoint deadline) {
    if (rend_ - rpos_ >= n) return true;
    if (rbuf_.size() - rpos_ < n) {
      std::memmove(rbuf_.data(), rbuf_.data() + rpos_, rend_ - rpos_);
      rend_ -= rpos_;
      rpos_ = 0;
      if (rbuf_.size() < n) rbuf_.resize(std::max(n, rbuf_.size() * 2));
    }
    while (rend_ - rpos_ < n)
      if (!recv_some(deadline)) return false;
    return true;
  }

  void fill(std::size_t n, TimePoint deadline) {
    if (!try_fill(n, deadline))
      io_error(fmt::format("no reply within {} ms (the store timeout): the server is hung or unreachable",
                           timeout().count()));
  }

  // Sends a request and reads its whole reply with the codec (protocol::parse_reply).
  protocol::Reply exchange(const Request& r, TimePoint deadline) {
    send_request(r);
    return read_reply(r, deadline);
  }
  protocol::Reply exchange(const Request& r) { return exchange(r, reply_deadline()); }

  // Reads one reply to `sent`: the codec says how many bytes it needs, the socket supplies them.
  protocol::Reply read_reply(const Request& sent, TimePoint deadline) {
    for (;;) {
      auto unread =
          std::span<const std::uint8_t>(reinterpret_cast<const std::uint8_t*>(rbuf_.data() + rpos_), rend_ - rpos_);
      auto pr = protocol::parse_reply(dialect_, sent, unread, kMaxReplyBytes);
      if (pr.status == protocol::ParseStatus::kError) protocol_error(pr.error);
      if (pr.status == protocol::ParseStatus::kOk) {
        rpos_ += pr.consumed;
        if (rpos_ == rend_) rpos_ = rend_ = 0;
        // Large buffers are not kept: one 1 GiB value must not pin 1 GiB for the life of the client.
        if (rbuf_.size() > 4 * kReadChunk && rpos_ == 0 && rend_ == 0) {
          rbuf_.resize(kReadChunk);
          rbuf_.shrink_to_fit();
        }
        return std::move(pr.reply);
      }
      fill(pr.need_at_least, deadline);
    }
  }

  std::string wire_key(const std::string& key) const { return options_.key_prefix + key; }

  std::vector<std::string> wire_keys(const std::vector<std::string>& keys) const {
    std::vector<std::string> out;
    out.reserve(keys.size());
    for (const auto& k : keys) out.push_back(wire_key(k));
    return out;
  }

  // ---- ctrun's ON_CLOSE extension ----
 public:
  bool append_on_close(const std::string& key, std::string_view on_close, std::string_view on_reconnect) {
    std::lock_guard lock(mutex_);
    if (!is_v2() || on_close_support_ == Support::kNo) return false;
    if (fd_ < 0) connect_locked();
    if (!register_on_close_locked(wire_key(key), on_close)) return false;
    on_close_[wire_key(key)] = {std::string(on_close), std::string(on_reconnect)};
    return true;
  }

  void cancel_on_close(const std::string& key) {
    std::lock_guard lock(mutex_);
    if (on_close_.erase(wire_key(key)) == 0 || fd_ < 0) return;
    begin(Command::kOnClose, key);
    exchange({.command = Command::kOnClose, .keys = {wire_key(key)}, .values = {""}, .integer = 0});
  }

 private:
  enum class Support : std::uint8_t { kUnknown, kYes, kNo };

  // One registration on the current connection. A server without the extension closes the connection on the
  // unknown opcode: remembered, false (the next request reconnects as after any lost connection).
  bool register_on_close_locked(const std::string& wire, std::string_view on_close) {
    set_context(Command::kOnClose, wire);
    apply_socket_timeouts();
    try {
      exchange({.command = Command::kOnClose, .keys = {wire}, .values = {std::string(on_close)}, .integer = 1});
    } catch (const StoreError& e) {
      if (on_close_support_ != Support::kUnknown) throw;
      on_close_support_ = Support::kNo;
      close_socket();
      log::get("store")->info("TCPStore {} has no ON_CLOSE (not a ctstore: {}); closed connections go unnoticed",
                              endpoint_, e.what());
      return false;
    }
    on_close_support_ = Support::kYes;
    return true;
  }

  // After a reconnect: say so in every registered key, then register again on the new connection.
  void restore_on_close_locked() {
    for (const auto& [wire, values] : on_close_) {
      set_context(Command::kAppend, wire);
      send_request({.command = Command::kAppend, .keys = {wire}, .values = {values.on_reconnect}});
      register_on_close_locked(wire, values.on_close);
    }
  }

  struct OnClose {
    std::string on_close, on_reconnect;
  };
  std::map<std::string, OnClose> on_close_;  // wire key -> values, while registered
  Support on_close_support_ = Support::kUnknown;
  bool connected_once_ = false;

  TcpStoreOptions options_;
  Dialect dialect_;           // options_.dialect, or the detected one
  bool detect_;               // not yet known: detect on the next connection
  bool peer_closed_ = false;  // the last failed read saw the server close the connection
  std::atomic<Duration::rep> timeout_ms_;
  std::string endpoint_;
  std::mutex mutex_;  // one request/reply exchange at a time on the single connection
  int fd_ = -1;
  std::vector<char> rbuf_;
  std::size_t rpos_ = 0, rend_ = 0;
  std::string wbuf_;
  std::string append_nonce_;                      // see append_legacy_locked
  Duration applied_timeout_{-1};                  // the timeout set as SO_RCVTIMEO/SO_SNDTIMEO on fd_
  Command current_command_ = Command::kValidate;  // for error messages
  std::string current_key_;
};

TcpStore::TcpStore(TcpStoreOptions options) : impl_(std::make_unique<Impl>(std::move(options))) {}
TcpStore::~TcpStore() = default;

void TcpStore::set(const std::string& key, std::string_view value) { impl_->set(key, value); }
std::string TcpStore::get(const std::string& key) { return impl_->get(key); }
std::string TcpStore::compare_set(const std::string& key, std::string_view expected, std::string_view desired) {
  return impl_->compare_set(key, expected, desired);
}
std::int64_t TcpStore::add(const std::string& key, std::int64_t delta) { return impl_->add(key, delta); }
bool TcpStore::check(const std::vector<std::string>& keys) { return impl_->check(keys); }
void TcpStore::wait(const std::vector<std::string>& keys, Duration timeout) { impl_->wait(keys, timeout); }
std::int64_t TcpStore::num_keys() { return impl_->num_keys(); }
bool TcpStore::delete_key(const std::string& key) { return impl_->delete_key(key); }
void TcpStore::append(const std::string& key, std::string_view value) { impl_->append(key, value); }
std::vector<std::string> TcpStore::multi_get(const std::vector<std::string>& keys) { return impl_->multi_get(keys); }
void TcpStore::multi_set(const std::vector<std::string>& keys, const std::vector<std::string>& values) {
  impl_->multi_set(keys, values);
}
void TcpStore::queue_push(const std::string& key, std::string_view value) { impl_->queue_push(key, value); }
std::optional<std::string> TcpStore::queue_pop(const std::string& key, bool block) {
  return impl_->queue_pop(key, block);
}
std::int64_t TcpStore::queue_len(const std::string& key) { return impl_->queue_len(key); }
std::vector<std::string> TcpStore::list_keys() { return impl_->list_keys(); }
void TcpStore::barrier(const std::string& key, std::int64_t world_size, Duration timeout) {
  impl_->barrier(key, world_size, timeout);
}
bool TcpStore::append_on_close(const std::string& key, std::string_view on_close, std::string_view on_reconnect) {
  return impl_->append_on_close(key, on_close, on_reconnect);
}
void TcpStore::cancel_on_close(const std::string& key) { impl_->cancel_on_close(key); }
Duration TcpStore::timeout() const { return impl_->timeout(); }
void TcpStore::set_timeout(Duration timeout) { impl_->set_timeout(timeout); }
void TcpStore::set_connect_timeout(Duration timeout) { impl_->set_connect_timeout(timeout); }
void TcpStore::ping() { impl_->ping(); }
const TcpStoreOptions& TcpStore::options() const { return impl_->options(); }
protocol::Dialect TcpStore::dialect() const { return impl_->dialect(); }

}  // namespace ctrun::store
