// The TCPStore server's networking: one Asio io_context on one thread (or the owner's), connections as small objects
// with no thread each. What a request does is the backend's (store/backend.hpp): the keyspace's semantics
// (keyspace.cpp, encoded by server_commands.cpp) or a relay's upstream (relay_backend.cpp); this file only moves bytes,
// and frames ctrun's tagged mode (MULTIPLEX: docs/protocol.md "Tagged mode").
//
// Memory per idle connection is kept small on purpose (the benchmark target is <= 16 KiB): an idle
// connection has only a 128-byte read buffer; longer input is read into one shared 64 KiB scratch buffer
// (safe: one loop thread), and only a partial request is copied into the connection.
#include "store/server.hpp"

#include <fcntl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <fstream>
#include <future>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <unordered_set>

#include <fmt/format.h>
#include <boost/asio.hpp>

#include "common/auth/handshake_asio.hpp"
#include "common/log.hpp"
#include "store/backend.hpp"
#include "store/keyspace_backend.hpp"
#include "store/server_commands.hpp"
#include "store/store.hpp"

namespace ctrun::store {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;
using detail::ConnId;

namespace {

constexpr std::size_t kScratchBytes = 64 * 1024;
// A connection whose unread replies pass this stops being read until they drain below kResumeBytes.
constexpr std::size_t kPauseBytes = 4u << 20;
constexpr std::size_t kResumeBytes = 1u << 20;
// When a connection is failed, queued replies up to this size are still sent before closing (the legacy
// MULTI_GET sends the values before the missing key); beyond it the connection is just closed.
constexpr std::size_t kLingerBytes = 256 * 1024;
// Buffers above this capacity are released when they empty, so a burst does not pin memory per connection.
constexpr std::size_t kKeepCapacity = 16 * 1024;
// Reads handled per readiness event before yielding to other connections.
constexpr int kReadsPerEvent = 4;
// The slowest sender a request is allowed to be from its first byte on (beyond --request-timeout): 64 KiB/s,
// so that a 256 MiB MULTI_SET over a slow link still gets through while a trickle is cut.
constexpr std::size_t kSlowSenderBytesPerSecond = 64 * 1024;
// Only connections holding at least this much unread reply are closed to make room for a writer.
constexpr std::size_t kReclaimAtLeast = 64 * 1024;
constexpr std::size_t kRefusedKinds = static_cast<std::size_t>(Refused::kUnauthenticated) + 1;

int somaxconn() {
  std::ifstream f("/proc/sys/net/core/somaxconn");
  int v = 0;
  if (f >> v && v > 0) return v;
  return 4096;
}

std::string endpoint_string(const tcp::endpoint& ep) {
  auto a = ep.address();
  if (a.is_v6()) return fmt::format("[{}]:{}", a.to_string(), ep.port());
  return fmt::format("{}:{}", a.to_string(), ep.port());
}

template <typename T>
void release_if_big(T& buf) {
  if (buf.empty() && buf.capacity() > kKeepCapacity) T().swap(buf);
}

struct Connection {
  Connection(ConnId i, tcp::socket s) : id(i), socket(std::move(s)) {}
  ConnId id;
  tcp::socket socket;
  std::string peer;
  std::array<std::uint8_t, 128> first;                    // the pending small read (see Impl::arm_read)
  std::optional<protocol::Dialect> dialect;               // decided from the first bytes
  std::vector<std::uint8_t> in;                           // the unparsed tail (a partial request)
  std::size_t need = 0;                                   // don't parse again before `in` holds this many bytes
  detail::ReplyBuffer out;                                // replies not yet handed to the socket
  std::uint64_t accounted = 0;                            // in + out's own bytes, as counted in Impl::io_bytes
  std::chrono::steady_clock::time_point partial_since{};  // when `in` last went from empty to a partial request
  bool write_waiting = false;                             // waiting for the socket to be writable again
  std::uint64_t requests = 0;                             // decoded so far
  std::shared_ptr<protocol::Request> slicing;             // a big request being executed in slices (detail::step)
  std::chrono::steady_clock::time_point heard{};          // when it last sent anything (ON_SILENCE)
  bool silence_fired = false;                             // an ON_SILENCE of its fired: its next bytes say "back"
  std::chrono::milliseconds silence_min{
      0};  // the shortest ON_SILENCE it registered: quieter than this, ask the backend
  bool read_armed = false;
  bool paused = false;   // too many unread replies: not reading until they drain
  bool closing = false;  // no more requests; close once the queued replies are written
  bool closed = false;
  bool dirty = false;  // has new output to flush
  bool held = false;   // the backend holds it (ExecResult::hold): no request is read until it resumes it
  // Tagged mode (after MULTIPLEX): the tagged request being executed (its slices included) and the id it runs
  // under (the connection's, or a WAIT's or BARRIER's own), its reply staged until it is framed, and the pending
  // WAITs and BARRIERs by tag, each under a virtual connection id of its own.
  struct Frame {
    std::uint64_t tag = 0;
    ConnId id = 0;
  };
  bool tagged = false;
  std::optional<Frame> frame;
  detail::ReplyBuffer staging;
  std::unordered_map<std::uint64_t, ConnId> waits;
};
using ConnPtr = std::shared_ptr<Connection>;

}  // namespace

const char* refused_name(Refused reason) {
  switch (reason) {
    case Refused::kConnectionCap:
      return "connection_cap";
    case Refused::kDescriptors:
      return "descriptors";
    case Refused::kBadRequest:
      return "bad_request";
    case Refused::kInvalidCommand:
      return "invalid_command";
    case Refused::kMemory:
      return "memory_limit";
    case Refused::kUnreadReplies:
      return "unread_replies";
    case Refused::kRequestTimeout:
      return "request_timeout";
    case Refused::kUnauthenticated:
      return "unauthenticated";
  }
  return "?";
}

class Server::Impl final : public detail::FrontEnd {
 public:
  Impl(ServerOptions o, const MakeBackend& make, asio::io_context* given)
      : opts(std::move(o)),
        owned_io(given ? nullptr : std::make_unique<asio::io_context>(1)),
        io(given ? *given : *owned_io),
        scratch(kScratchBytes),
        log(log::get("store")) {
    if (make) {
      backend = make(*this);
    } else {
      auto local =
          std::make_unique<detail::KeyspaceBackend>(*this, opts.max_total_bytes, opts.max_pending_output_bytes);
      keyspace_backend = local.get();
      backend = std::move(local);
    }
  }

  // ---- FrontEnd ----
  detail::ReplyBuffer* output(ConnId id) override {
    if (auto it = conns.find(id); it != conns.end()) {
      auto& c = it->second;
      if (c->closed) return nullptr;
      mark_dirty(c);
      return c->frame && c->frame->id == id ? &c->staging : &c->out;
    }
    // A tagged WAIT's or BARRIER's virtual connection: while its request executes, its reply is staged; later (the
    // keys appeared) it is answered in a frame of its own, and the wait is over.
    auto v = virtuals.find(id);
    if (v == virtuals.end()) return nullptr;
    auto owner = conns.find(v->second.first);
    if (owner == conns.end() || owner->second->closed) return nullptr;
    auto& c = owner->second;
    mark_dirty(c);
    if (c->frame && c->frame->id == id) return &c->staging;
    protocol::reply::frame(c->out, v->second.second, protocol::FrameStatus::kReply);
    c->waits.erase(v->second.second);
    virtuals.erase(v);
    return &c->out;
  }

  // Posted, never run inside the backend's call: the backend may resume a connection while its requests are being
  // processed.
  void resume(ConnId id) override {
    auto it = conns.find(id);
    if (it == conns.end()) return;
    post([this, c = it->second] {
      if (c->closed || !c->held) return;
      c->held = false;
      if (c->slicing) {
        continue_slice(c);
        return;
      }
      if (!c->in.empty() && !c->paused) process(c, std::span<const std::uint8_t>(c->in), /*from_scratch=*/false);
      flush_dirty();
      arm_read(c);
    });
  }

  void fail(ConnId id, detail::Refusal kind, const std::string& reason) override {
    auto it = conns.find(id);
    if (it == conns.end() || it->second->closed) return;
    auto c = it->second;
    reject(c, refused_by(kind), reason);
  }

  void fail_all(const std::string& reason) override {
    if (!conns.empty()) log->warn("TCPStore server: closing all {} connections: {}", conns.size(), reason);
    std::vector<ConnPtr> all;
    all.reserve(conns.size());
    for (auto& [id, c] : conns) all.push_back(c);
    for (auto& c : all) close_now(c);
  }

  void flush() override {
    flush_dirty();
    schedule_cleanup();
  }

  asio::io_context& loop() override { return io; }

  void mark_dirty(const ConnPtr& c) {
    if (!c->dirty) {
      c->dirty = true;
      dirty.push_back(c);
    }
  }

  // ---- lifecycle ----
  void listen() {
    asio::ip::address addr;
    boost::system::error_code ec;
    std::string host = opts.host;
    if (host.size() > 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
    addr = asio::ip::make_address(host, ec);
    if (ec) {
      tcp::resolver resolver(io);
      auto results = resolver.resolve(host, std::to_string(opts.port), ec);
      if (ec || results.empty())
        throw StoreError(
            fmt::format("TCPStore server: cannot resolve host '{}': {}. Pass an IP address or a "
                        "resolvable host name.",
                        opts.host, ec ? ec.message() : "no addresses"));
      // Prefer IPv4 for a name such as "localhost" (often ::1 first): clients given MASTER_ADDR=127.0.0.1
      // or the same name usually reach IPv4; pass "::" to serve both.
      addr = results.begin()->endpoint().address();
      for (const auto& r : results) {
        if (r.endpoint().address().is_v4()) {
          addr = r.endpoint().address();
          break;
        }
      }
    }
    tcp::endpoint ep(addr, opts.port);
    const std::string where = endpoint_string(ep);
    auto fail = [&](const char* what) {
      throw StoreError(
          fmt::format("TCPStore server: cannot {} {}: {}. Is another process using the port? Pick "
                      "another port, or 0 for an ephemeral one.",
                      what, where, ec.message()));
    };
    acceptor.open(ep.protocol(), ec);
    if (ec) fail("open a socket for");
    if (opts.reuse_address) acceptor.set_option(tcp::acceptor::reuse_address(true), ec);
    // "::" serves IPv4 too (dual stack), as PyTorch's libuv server does.
    if (addr.is_v6() && addr.is_unspecified()) acceptor.set_option(asio::ip::v6_only(false), ec);
    acceptor.bind(ep, ec);
    if (ec) fail("bind");
    const int backlog = opts.backlog > 0 ? opts.backlog : somaxconn();
    acceptor.listen(backlog, ec);
    if (ec) fail("listen on");
    bound_port = acceptor.local_endpoint().port();
    resolve_connection_cap();
    if (reserve_fd < 0) reserve_fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
    arm_sweep();
    log->info("TCPStore server on {} holds up to {} connections ({}; backlog {})",
              endpoint_string(acceptor.local_endpoint()), max_conns,
              max_conns == opts.max_connections ? std::string("--max-connections")
                                                : fmt::format("descriptor limit {}", fd_limit),
              backlog);
    accept_next();
  }

  void shutdown() {
    stopping = true;
    backend->stop();
    boost::system::error_code ec;
    acceptor.close(ec);
    accept_retry.cancel();
    sweep_timer.cancel();
    silence_timer.cancel();
    if (reserve_fd >= 0) ::close(reserve_fd);
    reserve_fd = -1;
    for (auto& [id, h] : handshakes) h->cancel();
    handshakes.clear();
    std::vector<ConnPtr> all;
    all.reserve(conns.size());
    for (auto& [id, c] : conns) all.push_back(c);
    for (auto& c : all) close_now(c);
  }

  // Runs fn on the loop thread and waits for it; inline when the loop is not running (or we are on it).
  template <typename Fn>
  auto on_loop(Fn fn) -> decltype(fn()) {
    if (!thread.joinable() || std::this_thread::get_id() == thread.get_id()) return fn();
    throw_if_failed();
    auto task = std::make_shared<std::packaged_task<decltype(fn())()>>(std::move(fn));
    auto fut = task->get_future();
    asio::post(io, [task] { (*task)(); });
    // The loop may fail before it runs the task: never wait on a dead loop.
    while (fut.wait_for(std::chrono::milliseconds(100)) != std::future_status::ready) throw_if_failed();
    return fut.get();
  }

  // Queues fn on the loop thread without waiting; inline when the loop is not running (or we are on it).
  template <typename Fn>
  void on_loop_later(Fn fn) {
    if (!thread.joinable() || std::this_thread::get_id() == thread.get_id()) return fn();
    throw_if_failed();
    asio::post(io, std::move(fn));
  }

  // Queues fn behind the loop's other work (run only while this server lives: a given io_context outlives it).
  template <typename Fn>
  void post(Fn fn) {
    asio::post(io, [alive = std::weak_ptr<int>(life), fn = std::move(fn)]() mutable {
      if (alive.lock()) fn();
    });
  }

  // ---- accepting ----
  void accept_next() {
    acceptor.async_accept([this](boost::system::error_code ec, tcp::socket s) {
      if (ec) {
        if (ec == asio::error::operation_aborted || !acceptor.is_open()) return;
        // Out of file descriptors: give up the reserve descriptor for a moment to accept the waiting
        // client and close it at once, so that it learns (instead of hanging in the backlog forever).
        if ((ec == asio::error::no_descriptors || ec.value() == ENFILE) && shed_one_connection()) {
          accept_next();
          return;
        }
        // Otherwise back off briefly instead of spinning on the error, and say so once per episode
        // rather than 20 times a second.
        if (!accept_failing)
          log->warn("TCPStore server: accept failed: {}; retrying every 50 ms (raise `ulimit -n`?)", ec.message());
        accept_failing = true;
        accept_retry.expires_after(std::chrono::milliseconds(50));
        accept_retry.async_wait([this](boost::system::error_code e) {
          if (!e) accept_next();
        });
        return;
      }
      accept_failing = false;
      on_accept(std::move(s));
      accept_next();
    });
  }

  void on_accept(tcp::socket s) {
    if (opts.secret) return authenticate(std::move(s));
    admit(std::move(s));
  }

  // With a secret: the job's handshake first, asynchronously on this loop (a silent client holds its socket and a
  // few fixed buffers for at most auth::kServerTimeout); only a client that proved it is admitted, with nothing it
  // sent before kept.
  void authenticate(tcp::socket s) {
    boost::system::error_code ec;
    auto remote = s.remote_endpoint(ec);
    std::string peer = ec ? std::string("?") : endpoint_string(remote);
    if (conns.size() + handshakes.size() >= max_conns) {
      count(Refused::kConnectionCap);
      log->warn("TCPStore server: refusing connection from {}: already {} connections (--max-connections {})", peer,
                conns.size() + handshakes.size(), max_conns);
      s.close(ec);
      return;
    }
    const std::uint64_t id = next_handshake++;
    handshakes[id] = auth::AsyncServerHandshake::start(
        std::move(s), opts.secret, auth::Purpose::kStore,
        [this, id, peer](tcp::socket s, std::optional<auth::Failure> failure) {
          handshakes.erase(id);
          if (!failure) return admit(std::move(s));
          count(Refused::kUnauthenticated);
          log->warn("TCPStore server: refused {}: {}", peer, auth::server_words(*failure));
        });
  }

  void admit(tcp::socket s) {
    boost::system::error_code ec;
    auto remote = s.remote_endpoint(ec);
    std::string peer = ec ? std::string("?") : endpoint_string(remote);
    if (conns.size() >= max_conns) {
      count(Refused::kConnectionCap);
      refuse(std::move(s), peer, cap_reason());
      return;
    }
    s.set_option(tcp::no_delay(true), ec);
    s.non_blocking(true, ec);
    auto c = std::make_shared<Connection>(next_id++, std::move(s));
    c->peer = std::move(peer);
    conns.emplace(c->id, c);
    ++accepted;
    arm_read(c);
  }

  // ---- ON_SILENCE: who has said nothing for how long ----
  // The sweep's period: a sixteenth of the shortest silence registered (a silence fires at most 1/16 late), between
  // these bounds. At 16,384 agents with torchrun's heartbeat (a 12.5 s silence) that is every 0.78 s, not 4 times a
  // second: the sweep walks every watched connection.
  static constexpr auto kMinSilenceSweep = std::chrono::milliseconds(250);
  static constexpr auto kMaxSilenceSweep = std::chrono::milliseconds(1000);

  void watch_silence(const ConnPtr& c, std::int64_t timeout_ms) {
    c->heard = std::chrono::steady_clock::now();
    if (timeout_ms <= 0) return;  // a cancellation: the sweep keeps the connection until it is gone (cheap)
    const std::chrono::milliseconds timeout(timeout_ms);
    c->silence_min = c->silence_min.count() == 0 ? timeout : std::min(c->silence_min, timeout);
    silence_floor = silence_floor.count() == 0 ? timeout : std::min(silence_floor, timeout);
    silence_watched.insert(c->id);
    if (!silence_sweeping) arm_silence_sweep();
  }

  // While any connection has an ON_SILENCE: the backend fires those whose silence is long enough (asked only for
  // connections quiet for at least their shortest registration).
  void arm_silence_sweep() {
    silence_sweeping = true;
    silence_timer.expires_after(
        std::clamp<std::chrono::milliseconds>(silence_floor / 16, kMinSilenceSweep, kMaxSilenceSweep));
    silence_timer.async_wait([this](boost::system::error_code ec) {
      silence_sweeping = false;
      if (ec || stopping) return;
      const auto now = std::chrono::steady_clock::now();
      for (auto it = silence_watched.begin(); it != silence_watched.end();) {
        auto c = conns.find(*it);
        if (c == conns.end()) {
          it = silence_watched.erase(it);
          continue;
        }
        auto& conn = *c->second;
        const auto quiet = std::chrono::duration_cast<std::chrono::milliseconds>(now - conn.heard);
        if (!conn.silence_fired && quiet >= conn.silence_min && backend->quiet(conn.id, quiet))
          conn.silence_fired = true;
        ++it;
      }
      flush_dirty();  // the appends woke waiters
      if (!silence_watched.empty()) arm_silence_sweep();
    });
  }

  // ---- connection limits ----
  // Descriptors kept free besides the connections: the acceptor, the reserve, the logger, an agent's own.
  static constexpr std::uint64_t kFdReserve = 32;
  // Refused connections kept open until their client has read why (or kRefusalLinger passed), at most this many.
  static constexpr std::size_t kMaxLingering = 64;
  static constexpr auto kRefusalLinger = std::chrono::seconds(2);

  // Why a connection over the cap is refused, as its client reports it.
  std::string cap_reason() const {
    const bool by_flag = opts.max_connections != 0 && max_conns == opts.max_connections;
    return fmt::format(
        "it holds its maximum of {} connections ({}). {}", max_conns,
        by_flag ? "--max-connections" : fmt::format("what its descriptor limit of {} allows", fd_limit),
        by_flag ? "Raise --max-connections" : "Raise the hard limit of open files (ulimit -Hn) where it runs");
  }

  // Turns a client away so that it learns why: the reason in place of its first reply (protocol::kRefusalMarker),
  // then a half-close. The socket stays open (bounded in number and time) until the client has read it: closing a
  // socket with the client's handshake unread would send a reset, which may destroy the reason before it is read.
  void refuse(tcp::socket s, const std::string& peer, const std::string& reason) {
    const auto now = std::chrono::steady_clock::now();
    ++refused_unlogged;
    if (now - last_refusal_log >= std::chrono::seconds(1)) {
      log->warn("TCPStore server: refused {} connection(s) (the last from {}): {}", refused_unlogged, peer, reason);
      refused_unlogged = 0;
      last_refusal_log = now;
    }
    std::string bytes;
    protocol::encode_refusal(reason, bytes);
    boost::system::error_code ec;
    ::send(s.native_handle(), bytes.data(), bytes.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    s.shutdown(tcp::socket::shutdown_send, ec);
    if (lingering >= kMaxLingering) return;  // closed here
    ++lingering;
    auto sock = std::make_shared<tcp::socket>(std::move(s));
    auto timer = std::make_shared<asio::steady_timer>(io, kRefusalLinger);
    auto done = std::make_shared<bool>(false);
    auto finish = [this, sock, timer, done] {
      if (*done) return;
      *done = true;
      --lingering;
      boost::system::error_code e;
      timer->cancel();
      sock->close(e);
    };
    timer->async_wait([finish](boost::system::error_code) { finish(); });
    drain_refused(sock, finish);
  }

  template <class Finish>
  void drain_refused(const std::shared_ptr<tcp::socket>& sock, Finish finish) {
    sock->async_read_some(asio::buffer(scratch.data(), 512),
                          [this, sock, finish](boost::system::error_code e, std::size_t) {
                            if (e || stopping)
                              return finish();  // EOF: the client read the reason and closed (or it is gone)
                            drain_refused(sock, finish);
                          });
  }

  // The process may hold as many descriptors as its hard limit allows: a store serving thousands of agents must not
  // stop at a soft limit of 1024 that nobody raised.
  void raise_descriptor_limit() {
    rlimit rl{};
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0) return;
    if (rl.rlim_cur < rl.rlim_max) {
      rl.rlim_cur = rl.rlim_max;
      if (setrlimit(RLIMIT_NOFILE, &rl) != 0) getrlimit(RLIMIT_NOFILE, &rl);
    }
    fd_limit = rl.rlim_cur;
  }

  void resolve_connection_cap() {
    raise_descriptor_limit();
    std::uint64_t by_fds = UINT64_MAX;
    if (fd_limit != RLIM_INFINITY) by_fds = fd_limit > 2 * kFdReserve ? fd_limit - kFdReserve : fd_limit / 2;
    max_conns = opts.max_connections == 0 ? by_fds : std::min<std::uint64_t>(opts.max_connections, by_fds);
    if (opts.max_connections > by_fds)
      log->warn(
          "TCPStore server: --max-connections {} is above what the descriptor limit allows; using {} (raise "
          "`ulimit -n` for more)",
          opts.max_connections, max_conns);
  }

  // At the descriptor limit: accept one waiting client on the reserve descriptor and close it.
  bool shed_one_connection() {
    if (reserve_fd < 0) return false;
    ::close(reserve_fd);
    reserve_fd = -1;
    sockaddr_storage addr{};
    socklen_t len = sizeof addr;
    int fd = ::accept4(acceptor.native_handle(), reinterpret_cast<sockaddr*>(&addr), &len, SOCK_CLOEXEC);
    if (fd >= 0) {
      const auto reason = fmt::format(
          "it is out of file descriptors ({} connections open, descriptor limit {}). Raise the hard limit of open "
          "files (ulimit -Hn) where it runs, or lower --max-connections",
          conns.size(), fd_limit);
      std::string bytes;
      protocol::encode_refusal(reason, bytes);
      ::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL | MSG_DONTWAIT);  // best effort: no descriptor to linger
      ::close(fd);
      count(Refused::kDescriptors);
      log->warn("TCPStore server: refusing a connection: {}", reason);
    }
    reserve_fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
    return fd >= 0;
  }

  // How long a request of `buffered` bytes so far may take from its first byte: the timeout, plus the time a
  // slow but honest sender (kSlowSenderBytesPerSecond) needs for those bytes.
  std::chrono::milliseconds partial_deadline(std::size_t buffered) const {
    return opts.partial_request_timeout + std::chrono::milliseconds(buffered * 1000 / kSlowSenderBytesPerSecond);
  }

  // Closes connections stuck in the middle of a request for longer than partial_deadline().
  void arm_sweep() {
    if (opts.partial_request_timeout.count() <= 0) return;
    auto period = std::min<std::chrono::milliseconds>(opts.partial_request_timeout / 4, std::chrono::seconds(1));
    sweep_timer.expires_after(std::max(period, std::chrono::milliseconds(10)));
    sweep_timer.async_wait([this](boost::system::error_code ec) {
      if (ec) return;
      const auto now = std::chrono::steady_clock::now();
      std::vector<ConnPtr> stale;
      for (auto& [id, c] : conns)
        if (!c->in.empty() && !c->paused && !c->slicing && !c->held && !c->closing &&
            now - c->partial_since > partial_deadline(c->in.size()))
          stale.push_back(c);
      for (auto& c : stale) {
        count(Refused::kRequestTimeout);
        log->warn(
            "TCPStore server: closing connection from {}: a request still incomplete ({} bytes) {} ms after its "
            "first byte (--request-timeout {} ms, plus 1 s per {} bytes received)",
            c->peer, c->in.size(),
            std::chrono::duration_cast<std::chrono::milliseconds>(now - c->partial_since).count(),
            opts.partial_request_timeout.count(), kSlowSenderBytesPerSecond);
        close_now(c);
      }
      arm_sweep();
    });
  }

  // ---- failure ----
  void throw_if_failed() const {
    if (failed.load()) {
      std::lock_guard<std::mutex> lock(failure_mutex);
      throw StoreError("TCPStore server failed: " + failure_message);
    }
  }

  // An exception escaped a handler: close everything (no listening socket that answers nothing), then
  // tell the owner.
  void fail(const std::string& what) {
    {
      std::lock_guard<std::mutex> lock(failure_mutex);
      failure_message = what;
    }
    failed = true;
    log->error("TCPStore server loop failed: {}; closing the server", what);
    try {
      shutdown();
    } catch (...) {
    }
    if (opts.on_failure) opts.on_failure(what);
  }

  // ---- reading ----
  // Each connection keeps one small read pending into its own 128-byte buffer: most requests fit, and an
  // async_read_some (unlike async_wait) lets Asio skip an epoll_ctl per request. Anything longer is then
  // read straight into the shared scratch buffer.
  void arm_read(const ConnPtr& c) {
    if (c->read_armed || c->paused || c->slicing || c->held || c->closing || c->closed) return;
    c->read_armed = true;
    c->socket.async_read_some(asio::buffer(c->first), [this, c](boost::system::error_code ec, std::size_t n) {
      c->read_armed = false;
      if (c->closed) return;
      if (ec) {
        if (ec != asio::error::operation_aborted) on_read_error(c, ec);
        flush_dirty();
        return;
      }
      on_bytes(c, c->first.data(), n);
      if (n == c->first.size()) read_more(c);
      flush_dirty();
      arm_read(c);
    });
  }

  // EOF (the client half-closed or left) or a reset: its waits are forgotten now; replies already queued
  // still go out before the close (a client that half-closes after its last request reads them).
  void on_read_error(const ConnPtr& c, const boost::system::error_code& ec) {
    forget(c);
    if (ec == asio::error::eof)
      begin_close(c, /*bounded_linger=*/false);
    else
      close_now(c);
  }

  void read_more(const ConnPtr& c) {
    for (int i = 0; i < kReadsPerEvent && !c->closing && !c->closed && !c->paused && !c->slicing && !c->held; ++i) {
      boost::system::error_code ec;
      std::size_t n = c->socket.read_some(asio::buffer(scratch), ec);
      if (ec == asio::error::would_block || ec == asio::error::try_again) break;
      if (ec) {
        on_read_error(c, ec);
        break;
      }
      on_bytes(c, scratch.data(), n);
      if (n < scratch.size()) break;  // drained for now
    }
  }

  void on_bytes(const ConnPtr& c, const std::uint8_t* data, std::size_t n) {
    bytes_in += n;
    if (silence_watched.count(c->id)) {
      c->heard = std::chrono::steady_clock::now();
      if (c->silence_fired) {
        c->silence_fired = false;
        backend->spoke(c->id);
      }
    }
    // A request's clock starts with its first byte and does not restart with later ones: a sender trickling
    // one byte every 29 s is timed out like one that stalls. A large value sent slowly is not: the sweep
    // allows each buffered byte kSlowSenderBytesPerSecond of extra time on top of the timeout.
    if (c->in.empty()) c->partial_since = std::chrono::steady_clock::now();
    if (c->in.empty()) {
      process(c, std::span<const std::uint8_t>(data, n), /*from_scratch=*/true);
      return;
    }
    // Counted before it is allocated: the buffer grows to what the request is known to need (or doubles),
    // and only if that fits the memory limit.
    const std::size_t want = c->in.size() + n;
    if (want > c->in.capacity()) {
      const std::size_t target =
          std::max(want, std::min<std::size_t>(std::max(c->need, c->in.capacity() * 2), opts.limits.max_request_bytes));
      if (backend->held_bytes() + io_bytes - c->accounted + target + c->out.inline_size() > opts.max_total_bytes) {
        reject(c, Refused::kMemory,
               fmt::format("buffering its {}-byte partial request would exceed the server's memory limit of {} "
                           "bytes (--max-total-bytes)",
                           want, opts.max_total_bytes));
        return;
      }
      c->in.reserve(target);
    }
    c->in.insert(c->in.end(), data, data + n);
    if (c->in.size() < c->need) {
      account(c);
      check_memory(c);
      return;
    }
    process(c, std::span<const std::uint8_t>(c->in), /*from_scratch=*/false);
  }

  bool output_backlogged(const ConnPtr& c) const { return c->out.size() > kPauseBytes; }

  // Executes the whole requests at the front of buf (the scratch buffer, or c->in) and keeps the rest in
  // c->in. Stops early when the connection's unread replies pile up: the remaining requests wait in c->in
  // (at most one read's worth) until the client has read its replies.
  void process(const ConnPtr& c, std::span<const std::uint8_t> buf, bool from_scratch) {
    std::size_t off = 0;
    c->need = 0;
    while (off < buf.size() && !c->closing && !c->slicing && !c->held) {
      if (output_backlogged(c)) {
        c->paused = true;
        break;
      }
      auto rest = buf.subspan(off);
      if (!c->dialect) {
        auto d = protocol::detect_dialect(rest);
        if (d == protocol::Detected::kNeedMore) {
          c->need = rest.size() + 1;
          break;
        }
        c->dialect = d == protocol::Detected::kV2 ? protocol::Dialect::kV2 : protocol::Dialect::kLegacy;
      }
      std::uint64_t tag = 0;
      auto pr = c->tagged ? protocol::parse_tagged_request(rest, opts.limits, tag)
                          : protocol::parse_request(*c->dialect, rest, opts.limits);
      if (pr.status == protocol::ParseStatus::kNeedMore) {
        c->need = pr.need_at_least;
        break;
      }
      if (pr.status == protocol::ParseStatus::kError) {
        if (c->requests == 0 && auth::is_handshake(rest.data(), rest.size()))
          reject(c, Refused::kBadRequest,
                 "it is a ctrun agent with a job secret, and this store has none: give the store the same secret "
                 "(the hosting agent's --secret-file or CTRUN_SECRET; ctstore --secret-file)");
        else if (c->requests == 0 && *c->dialect == protocol::Dialect::kLegacy && rest[0] == 0)
          reject(c, Refused::kBadRequest,
                 fmt::format("its first bytes are neither torch >= 2.1's handshake (00 then the magic "
                             "CE F7 85 3C) nor a valid torch <= 2.0 request ({}); wrong port or not a "
                             "TCPStore client?",
                             pr.error));
        else
          reject(c, Refused::kBadRequest, pr.error);
        break;
      }
      ++c->requests;
      off += pr.consumed;
      ++ops[static_cast<std::size_t>(pr.request.command)];
      if (pr.request.command == protocol::Command::kMultiplex) {
        if (!multiplex(c, pr.request)) break;
        continue;
      }
      if (c->tagged) {
        execute_tagged(c, tag, std::move(pr.request));
        continue;
      }
      auto res = backend->execute(c->id, pr.request);
      if (pr.request.command == protocol::Command::kOnSilence && !res.close) watch_silence(c, pr.request.integer);
      if (res.close) {
        reject(c, refused_by(res.refusal), res.reason);
        break;
      }
      if (res.hold) {
        // The backend answers later (a relay's upstream): this connection's next requests wait in c->in, unread
        // further, until it resumes it; a request it could not take yet is stepped again then.
        c->held = true;
        if (res.more) c->slicing = std::make_shared<protocol::Request>(std::move(pr.request));
        break;
      }
      if (res.more) {
        // A big request: the rest runs in slices, each posted behind the other connections' work. This
        // connection's later requests wait (in c->in, not read further) until it is done.
        c->slicing = std::make_shared<protocol::Request>(std::move(pr.request));
        post([this, c] { continue_slice(c); });
        break;
      }
    }
    if (c->closing) {
      c->in.clear();
    } else if (from_scratch) {
      c->in.assign(buf.begin() + static_cast<std::ptrdiff_t>(off), buf.end());
    } else {
      c->in.erase(c->in.begin(), c->in.begin() + static_cast<std::ptrdiff_t>(off));
    }
    release_if_big(c->in);
    if (!c->in.empty() && off > 0) c->partial_since = std::chrono::steady_clock::now();
    account(c);
    check_memory(c);
    schedule_cleanup();
  }

  // ---- writing ----
  void flush_dirty() {
    // Replies may be queued for many connections by one request (wake-ups, watch events).
    // Swapped with a kept buffer rather than moved out, so that neither vector gives up its capacity: the
    // hot path (one batch of replies per read) then allocates nothing here.
    std::vector<ConnPtr> list;
    list.swap(flushing);
    list.swap(dirty);
    for (auto& c : list) {
      c->dirty = false;
      if (c->closed) continue;
      account(c);
      if (c->out.size() > opts.max_pending_output_bytes) {
        log->warn(
            "TCPStore server: closing connection from {}: {} bytes of replies unread (limit {}, "
            "--max-pending-bytes); a watcher or waiter that does not read its events?",
            c->peer, c->out.size(), opts.max_pending_output_bytes);
        count(Refused::kUnreadReplies);
        close_now(c);
        continue;
      }
      if (output_backlogged(c)) c->paused = true;
      start_write(c);
    }
    list.clear();
    if (flushing.empty()) flushing.swap(list);  // keep the capacity (a nested flush may have refilled it)
  }

  // Gather-writes the queued segments (inline bytes and shared values) without copying them together.
  // Most replies are a few bytes and fit in the socket buffer: they go out now, with no async operation.
  // Only a remainder (a big reply, a slow reader) waits for the socket to become writable.
  void start_write(const ConnPtr& c) {
    if (c->closed || c->write_waiting) return;
    while (!c->out.empty()) {
      iovec iov[64];
      msghdr msg{};
      msg.msg_iov = iov;
      msg.msg_iovlen = static_cast<std::size_t>(c->out.gather(iov, 64));
      ssize_t n = ::sendmsg(c->socket.native_handle(), &msg, MSG_NOSIGNAL);
      if (n < 0) {
        if (errno == EINTR) continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK) {
          account(c);
          c->write_waiting = true;
          c->socket.async_wait(tcp::socket::wait_write, [this, c](boost::system::error_code ec) {
            c->write_waiting = false;
            if (c->closed) return;
            if (ec) {
              close_now(c);
              return;
            }
            start_write(c);
            resume_reading(c);
          });
          return;
        }
        close_now(c);
        return;
      }
      c->out.consume(static_cast<std::size_t>(n));
      bytes_out += static_cast<std::size_t>(n);
    }
    account(c);
    if (c->closing) {
      close_now(c);
    } else if (c->paused) {
      // Resume from the loop rather than recursing into process() from here.
      post([this, c] { resume_reading(c); });
    }
  }

  // The server's memory is full: close the connections holding the most unread replies (clients that do
  // not read), so that a writer is not refused because of them.
  bool reclaim(std::uint64_t bytes, ConnId except) override {
    ConnPtr victim;
    for (auto& [id, c] : conns) {
      if (id == except || c->closed || c->out.size() < kReclaimAtLeast) continue;
      if (!victim || c->out.size() > victim->out.size()) victim = c;
    }
    if (!victim) return false;
    count(Refused::kUnreadReplies);
    log->warn(
        "TCPStore server: closing connection from {}: it holds {} bytes of unread replies and the server's memory "
        "limit of {} bytes (--max-total-bytes) is reached ({} more bytes wanted by another client)",
        victim->peer, victim->out.size(), opts.max_total_bytes, bytes);
    close_now(victim);
    return true;
  }

  void continue_slice(const ConnPtr& c) {
    if (c->closed || !c->slicing) return;
    auto res = backend->step(c->frame ? c->frame->id : c->id, *c->slicing);
    if (c->frame && !res.more) {
      const auto command = c->slicing->command;
      c->slicing.reset();
      finish_tagged(c, command, res);
      res = {};
    }
    if (res.close) {
      c->slicing.reset();
      reject(c, refused_by(res.refusal), res.reason);
    } else if (res.hold) {
      c->held = true;  // resumed by the backend; a request not taken yet (more) stays in c->slicing
      if (!res.more) c->slicing.reset();
    } else if (res.more) {
      post([this, c] { continue_slice(c); });
    } else {
      c->slicing.reset();
      if (!c->in.empty() && !c->paused) process(c, std::span<const std::uint8_t>(c->in), /*from_scratch=*/false);
      arm_read(c);
    }
    flush_dirty();
    schedule_cleanup();
  }

  // ---- tagged mode (MULTIPLEX) ----
  // MULTIPLEX: the connection's next requests are tagged frames. Only a v2 connection of a backend that serves them
  // (the keyspace; a relay's own clients are torch's, untagged). False when the connection was failed.
  bool multiplex(const ConnPtr& c, const protocol::Request& r) {
    if (c->tagged || *c->dialect != protocol::Dialect::kV2 || !backend->serves_tagged() || r.u32 < 1) {
      reject(c, Refused::kBadRequest,
             fmt::format("MULTIPLEX version {} is not served here (ctrun's tagged mode, for its store relays)", r.u32));
      return false;
    }
    protocol::reply::ping(*output(c->id), protocol::kMultiplexVersion);  // the version granted
    c->tagged = true;
    return true;
  }

  // One tagged request: executed under the connection's id, or for a WAIT or BARRIER under a virtual id of its own
  // (so that it waits apart from the connection's other requests); its reply framed with its tag.
  void execute_tagged(const ConnPtr& c, std::uint64_t tag, protocol::Request r) {
    using protocol::Command;
    ConnId id = c->id;
    if (r.command == Command::kWait || r.command == Command::kBarrier) {
      if (c->waits.count(tag)) {
        count(Refused::kInvalidCommand);
        protocol::reply::refused_frame(*output(c->id), tag, fmt::format("tag {} already names a pending wait", tag));
        return;
      }
      id = next_id++;
      virtuals.emplace(id, std::make_pair(c->id, tag));
      c->waits.emplace(tag, id);
    } else if (r.command == Command::kCancelWait) {
      if (auto w = c->waits.find(tag); w != c->waits.end()) id = w->second;  // the wait this tag names
    }
    c->frame = Connection::Frame{tag, id};
    auto res = backend->execute(id, r);
    if (r.command == Command::kOnSilence && !res.close) watch_silence(c, r.integer);
    if (res.more) {
      c->slicing = std::make_shared<protocol::Request>(std::move(r));
      post([this, c] { continue_slice(c); });
      return;
    }
    finish_tagged(c, r.command, res);
  }

  // The tagged request in c->frame is done: its reply (or its refusal) goes out in its frame. A WAIT or BARRIER not
  // answered yet stays registered under its virtual id (answered in output()); anything else lets the id go.
  void finish_tagged(const ConnPtr& c, protocol::Command command, const detail::ExecResult& res) {
    using protocol::Command;
    const Connection::Frame frame = *c->frame;
    c->frame.reset();
    const bool waits = command == Command::kWait || command == Command::kBarrier;
    auto drop_virtual = [&] {
      if (frame.id == c->id) return;
      c->waits.erase(frame.tag);
      virtuals.erase(frame.id);
      backend->forget(frame.id);
    };
    mark_dirty(c);
    if (res.close) {
      c->staging.clear();
      count(refused_by(res.refusal));
      log->debug("TCPStore server: refusing tagged request {} of {}: {}", frame.tag, c->peer, res.reason);
      protocol::reply::refused_frame(c->out, frame.tag, res.reason);
      drop_virtual();
      return;
    }
    if (waits && c->staging.empty()) return;  // registered: answered when its keys are there
    if (protocol::has_reply(command)) {
      protocol::reply::frame(c->out, frame.tag, protocol::FrameStatus::kReply);
      c->out.append(c->staging);
    }
    if (waits || command == Command::kCancelWait) drop_virtual();
  }

  // Stale wait entries of big waits that ended are removed a slice at a time, between other work.
  void schedule_cleanup() {
    if (cleanup_posted || !backend->has_cleanup()) return;
    cleanup_posted = true;
    post([this] {
      cleanup_posted = false;
      if (backend->cleanup_step()) schedule_cleanup();
    });
  }

  // The client caught up with its replies: run the requests that waited in c->in, then read again.
  void resume_reading(const ConnPtr& c) {
    if (c->closed || !c->paused || c->slicing || c->held || c->out.size() >= kResumeBytes) return;
    c->paused = false;
    if (!c->in.empty()) process(c, std::span<const std::uint8_t>(c->in), /*from_scratch=*/false);
    flush_dirty();
    arm_read(c);
  }

  // ---- closing ----
  void count(Refused reason) { ++refused[static_cast<std::size_t>(reason)]; }

  // The connection's requests are over: the backend drops what it held for it, its tagged waits included.
  void forget(const ConnPtr& c) {
    backend->forget(c->id);
    for (const auto& [tag, id] : c->waits) {
      virtuals.erase(id);
      backend->forget(id);
    }
    c->waits.clear();
  }

  static Refused refused_by(detail::Refusal r) {
    return r == detail::Refusal::kMemory        ? Refused::kMemory
           : r == detail::Refusal::kReplyBudget ? Refused::kUnreadReplies
                                                : Refused::kInvalidCommand;
  }

  // Fails the connection: logged with the peer, replies already queued still go out (bounded), then close.
  void reject(const ConnPtr& c, Refused reason, const std::string& why) {
    count(reason);
    log->warn("TCPStore server: closing connection from {}: {}", c->peer, why);
    forget(c);
    begin_close(c);
  }

  // A client that half-closed after its last request still reads every reply (bounded_linger false); a
  // connection failed for bad input only gets a short tail of replies before the close.
  void begin_close(const ConnPtr& c, bool bounded_linger = true) {
    if (c->closing || c->closed) return;
    c->closing = true;
    if (bounded_linger && c->out.size() > kLingerBytes) {
      close_now(c);
      return;
    }
    // Make sure the close happens even if no reply is queued.
    if (!c->dirty) {
      c->dirty = true;
      dirty.push_back(c);
    }
  }

  void close_now(const ConnPtr& c) {
    if (c->closed) return;
    c->closed = true;
    forget(c);
    c->slicing.reset();
    if (!stopping) schedule_cleanup();
    boost::system::error_code ec;
    c->socket.close(ec);
    c->in.clear();
    c->out.clear();
    c->staging.clear();
    c->frame.reset();
    account(c);
    conns.erase(c->id);
    silence_watched.erase(c->id);
  }

  // ---- memory ----
  void account(const ConnPtr& c) {
    std::uint64_t now = c->closed ? 0
                                  : c->in.capacity() + c->out.inline_size() + c->staging.inline_size() +
                                        c->waits.size() * 2 * detail::kEntryOverhead;
    io_bytes = io_bytes - c->accounted + now;
    c->accounted = now;
    backend->set_io_bytes(io_bytes);
  }

  void check_memory(const ConnPtr& c) {
    if (c->closed || c->closing) return;
    if (backend->held_bytes() + io_bytes > opts.max_total_bytes && !c->in.empty()) {
      reject(c, Refused::kMemory,
             fmt::format("buffering its {}-byte request would exceed the server's memory limit of {} bytes",
                         c->in.size(), opts.max_total_bytes));
    }
  }

  ServerStats stats() {
    ServerStats s;
    s.connections_accepted = accepted;
    s.connections_open = conns.size();
    for (std::size_t i = 0; i < kRefusedKinds; ++i) {
      s.connections_rejected += refused[i];
      s.refused.emplace_back(refused_name(static_cast<Refused>(i)), refused[i]);
    }
    s.bytes_in = bytes_in;
    s.bytes_out = bytes_out;
    const auto b = backend->stats();
    s.keys = b.keys;
    s.bytes = b.bytes;
    s.pending_waits = b.pending_waits;
    s.held_bytes = backend->held_bytes() + io_bytes;
    for (int i = 0; i <= static_cast<int>(protocol::kLastCommand); ++i) {
      auto c = static_cast<protocol::Command>(i);
      if (auto n = ops[static_cast<std::size_t>(i)]) s.ops.emplace_back(protocol::command_name(c), n);
    }
    return s;
  }

  ServerOptions opts;
  std::unique_ptr<asio::io_context> owned_io;  // null when the owner's context was given
  asio::io_context& io;
  tcp::acceptor acceptor{io};
  std::unordered_map<std::uint64_t, std::shared_ptr<auth::AsyncServerHandshake>> handshakes;  // ServerOptions::secret
  std::uint64_t next_handshake = 0;
  asio::steady_timer accept_retry{io};
  asio::steady_timer sweep_timer{io};
  asio::steady_timer silence_timer{io};
  std::unordered_set<ConnId> silence_watched;  // connections that registered an ON_SILENCE (pruned by the sweep)
  bool silence_sweeping = false;
  std::chrono::milliseconds silence_floor{0};  // the shortest ON_SILENCE ever registered here: sets the sweep's period
  std::uint64_t max_conns = 0;
  rlim_t fd_limit = RLIM_INFINITY;  // RLIMIT_NOFILE's soft limit after raise_descriptor_limit()
  std::size_t lingering = 0;        // refused sockets still open (refuse())
  std::uint64_t refused_unlogged = 0;
  std::chrono::steady_clock::time_point last_refusal_log{};
  int reserve_fd = -1;
  std::atomic<bool> failed{false};
  mutable std::mutex failure_mutex;
  std::string failure_message;
  std::unique_ptr<detail::Backend> backend;
  detail::KeyspaceBackend* keyspace_backend = nullptr;  // the backend when it is the server's own keyspace
  // Tagged mode: each pending tagged WAIT's or BARRIER's virtual connection id -> (its connection, its tag).
  std::unordered_map<ConnId, std::pair<ConnId, std::uint64_t>> virtuals;
  // Handlers posted to a given io_context may run after this object is gone: they hold this token weakly.
  std::shared_ptr<int> life = std::make_shared<int>(0);
  std::array<std::uint64_t, static_cast<std::size_t>(protocol::kLastCommand) + 1> ops{};  // requests per command
  std::vector<std::uint8_t> scratch;
  std::unordered_map<ConnId, ConnPtr> conns;
  std::vector<ConnPtr> dirty;
  std::vector<ConnPtr> flushing;  // spare buffer for flush_dirty
  ConnId next_id = 1;
  std::uint64_t io_bytes = 0;
  std::uint64_t accepted = 0;
  std::uint64_t bytes_in = 0;                          // read from clients
  std::uint64_t bytes_out = 0;                         // written to clients
  std::array<std::uint64_t, kRefusedKinds> refused{};  // connections refused or closed, by reason
  std::uint16_t bound_port = 0;
  std::thread thread;
  bool started = false;
  bool accept_failing = false;
  bool cleanup_posted = false;
  bool stopping = false;  // shutdown(): no more work posted
  std::shared_ptr<spdlog::logger> log;
};

Server::Server(ServerOptions options) : impl_(std::make_unique<Impl>(std::move(options), MakeBackend{}, nullptr)) {}

Server::Server(ServerOptions options, const MakeBackend& make, asio::io_context* io)
    : impl_(std::make_unique<Impl>(std::move(options), make, io)) {}

Server::~Server() { stop(); }

void Server::start() {
  if (impl_->started) return;
  if (impl_->owned_io && impl_->io.stopped()) impl_->io.restart();  // started again after stop()
  impl_->listen();
  impl_->started = true;
  if (!impl_->owned_io) return;  // the owner runs its context
  impl_->thread = std::thread([impl = impl_.get()] {
    // Handlers do not throw by design; if one does (out of memory, a bug), the server must not live on as
    // a listening socket that answers nothing: it closes and tells its owner.
    try {
      impl->io.run();
    } catch (const std::exception& e) {
      impl->fail(e.what());
    } catch (...) {
      impl->fail("unknown exception");
    }
  });
}

void Server::stop() {
  if (!impl_ || !impl_->started) return;
  if (impl_->thread.joinable()) {
    try {
      if (!impl_->failed.load()) impl_->on_loop([this] { impl_->shutdown(); });
    } catch (const StoreError&) {
      // The loop failed meanwhile: it closed everything itself.
    }
    impl_->io.stop();
    impl_->thread.join();
  } else if (!impl_->failed.load()) {
    impl_->shutdown();  // the owner's context: called from its thread
  }
  impl_->started = false;
}

std::uint16_t Server::port() const { return impl_->bound_port; }
std::uint64_t Server::max_connections() const { return impl_->max_conns; }
std::optional<std::string> Server::failure() const {
  if (!impl_->failed.load()) return std::nullopt;
  std::lock_guard<std::mutex> lock(impl_->failure_mutex);
  return impl_->failure_message;
}
const std::string& Server::host() const { return impl_->opts.host; }

namespace {
detail::Keyspace& owned_keyspace(detail::KeyspaceBackend* backend) {
  if (!backend) throw StoreError("this server relays its requests to another store: it has no keyspace of its own");
  return backend->keyspace();
}
}  // namespace

void Server::clear() {
  owned_keyspace(impl_->keyspace_backend);
  impl_->on_loop_later([this] { impl_->keyspace_backend->keyspace().clear(); });
}

std::optional<std::string> Server::get_local(const std::string& key) {
  return impl_->on_loop([&] { return owned_keyspace(impl_->keyspace_backend).value(key); });
}

void Server::set_local(const std::string& key, std::string value) {
  impl_->on_loop([&] {
    auto res = owned_keyspace(impl_->keyspace_backend).set(detail::kLocalConn, key, value);
    impl_->flush_dirty();  // wakes waiters: their replies must go out
    if (!res.ok()) throw StoreError("the store's owner could not set '" + key + "': " + res.refused);
  });
}

std::vector<std::string> Server::keys_local() {
  return impl_->on_loop([this] { return owned_keyspace(impl_->keyspace_backend).keys(); });
}

ServerStats Server::stats() {
  return impl_->on_loop([this] { return impl_->stats(); });
}

void Server::run_on_loop(const std::function<void()>& fn) { impl_->on_loop(fn); }

void Server::post_to_loop(std::function<void()> fn) { impl_->on_loop_later(std::move(fn)); }

}  // namespace ctrun::store
