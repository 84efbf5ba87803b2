#include "store/mux_store.hpp"

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <deque>
#include <future>
#include <map>
#include <mutex>
#include <thread>
#include <unordered_map>

#include <fmt/format.h>
#include <boost/asio.hpp>

#include "common/auth/handshake.hpp"
#include "common/log.hpp"
#include "store/async_wait.hpp"
#include "store/client_loop.hpp"
#include "store/store_util.hpp"
#include "store/tcp_socket.hpp"

namespace ctrun::store {

namespace asio = boost::asio;
using protocol::Command;
using protocol::Dialect;
using protocol::Reply;
using protocol::Request;
using TimePoint = Clock::time_point;
using Mode = MuxStore::Mode;

namespace {

// Replies larger than this are treated as a corrupt stream rather than allocated (as TcpStore).
constexpr std::uint64_t kMaxReplyBytes = 4ull << 30;
constexpr std::size_t kReadChunk = 64 * 1024;
// How often a wait that cannot be on the wire (legacy servers; several waits at once on torch's) is polled.
constexpr Duration kPollInterval{20};
// How long a dialect probe waits for an answer before trying the other dialect (as TcpStore).
constexpr auto kDetectTimeout = std::chrono::seconds(3);

// What parse_reply needs of a request: its command, and for MULTI_GET how many values come back.
Request shape_of(const Request& r) {
  Request s{.command = r.command};
  if (r.command == Command::kMultiGet || r.command == Command::kPeek) s.keys.resize(r.keys.size());
  return s;
}

std::string context_of(const Request& r) {
  std::string s = protocol::command_name(r.command);
  if (!r.keys.empty()) s += fmt::format(" '{}'", printable_key(r.keys.front()));
  return s;
}

// ---- the blocking handshake on a fresh socket (a caller's thread, never the loop) ----

void send_all(int fd, std::string_view data, TimePoint deadline) {
  std::size_t off = 0;
  while (off < data.size()) {
    ssize_t n = ::send(fd, data.data() + off, data.size() - off, MSG_NOSIGNAL);
    if (n > 0) {
      off += static_cast<std::size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      pollfd p{.fd = fd, .events = POLLOUT, .revents = 0};
      if (::poll(&p, 1, poll_timeout(deadline)) <= 0) throw StoreError("the server accepted no data in time");
      continue;
    }
    throw StoreError(fmt::format("send failed ({})", std::strerror(errno)));
  }
}

// Reads exactly n bytes; `closed` says whether a failure was the server closing the connection.
void recv_exact(int fd, std::uint8_t* out, std::size_t n, TimePoint deadline, bool& closed) {
  std::size_t got = 0;
  while (got < n) {
    pollfd p{.fd = fd, .events = POLLIN, .revents = 0};
    int rc = ::poll(&p, 1, poll_timeout(deadline));
    if (rc < 0 && errno == EINTR) continue;
    if (rc == 0) throw StoreError("no reply to the handshake in time");
    ssize_t r = ::recv(fd, out + got, n - got, 0);
    if (r > 0) {
      got += static_cast<std::size_t>(r);
      continue;
    }
    if (r < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    closed = r == 0 || errno == ECONNRESET;
    throw StoreError(r == 0 ? std::string("the server closed the connection")
                            : fmt::format("recv failed ({})", std::strerror(errno)));
  }
}

struct Handshake {
  int fd = -1;
  Dialect dialect = Dialect::kV2;
  std::uint32_t features = 0;
  bool tagged = false;  // MULTIPLEX was granted: the connection is in tagged mode
};

}  // namespace

// One TCP connection and its read buffer. Asio's pending operations hold it, so that a connection being replaced
// never has a read landing in a buffer that is gone.
struct Link {
  explicit Link(asio::io_context& io) : socket(io), rbuf(kReadChunk) {}
  asio::ip::tcp::socket socket;
  std::vector<std::uint8_t> rbuf;
  std::size_t rpos = 0, rend = 0;
};

// ---------------------------------------------------------------------------------------------------------------
// The shared connection. Callers on any thread encode requests into the outbox and the in-order queue under mu_
// and write what they can at once; the loop thread reads and completes. Completions that run user code (a wait's
// `done`) run with mu_ released.
class MuxStore::Connection : public std::enable_shared_from_this<MuxStore::Connection> {
 public:
  struct OnSilence {
    std::string silent, back;
    Duration timeout{0};
  };

  // `loop` outlives the connection's use (the MuxStores that own the connection hold it).
  Connection(MuxStore::Options o, ClientLoop& loop)
      : options_(std::move(o)),
        loop_(loop),
        dialect_(options_.dialect.value_or(Dialect::kV2)),
        detect_(!options_.dialect.has_value()),
        endpoint_(format_endpoint(options_.host, options_.port)) {}

  ~Connection() = default;

  const std::string& endpoint() const { return endpoint_; }
  const MuxStore::Options& options() const { return options_; }

  Mode mode() const {
    std::lock_guard lock(mu_);
    return mode_;
  }
  Dialect dialect() const {
    std::lock_guard lock(mu_);
    return dialect_;
  }
  bool supports(std::uint32_t feature) const {
    std::lock_guard lock(mu_);
    return connected_once_ && (features_ & feature) != 0;
  }

  // ---- requests ----

  // Sends r and waits for its reply (at most `timeout`; then the connection is dropped: the server is hung).
  Reply call(const Request& r, Duration timeout, Duration connect_timeout) {
    return std::move(calls({r}, timeout, connect_timeout).front());
  }

  // Sends every request in one write (pipelined) and waits for their replies.
  std::vector<Reply> calls(const std::vector<Request>& requests, Duration timeout, Duration connect_timeout) {
    if (requests.empty()) return {};
    refuse_on_loop(requests.front());
    std::vector<std::future<Reply>> futures;
    futures.reserve(requests.size());
    std::uint64_t gen = 0;
    {
      std::unique_lock lock(mu_);
      connect_locked(lock, connect_timeout);
      gen = gen_;
      for (const auto& r : requests) {
        auto promise = std::make_shared<std::promise<Reply>>();
        futures.push_back(promise->get_future());
        enqueue_locked(r, Slot{Slot::kCall, shape_of(r), promise, nullptr});
      }
      settle_locked();
    }
    const auto deadline = deadline_after(timeout);
    std::vector<Reply> out;
    out.reserve(requests.size());
    for (std::size_t i = 0; i < futures.size(); ++i) {
      if (futures[i].wait_until(deadline) != std::future_status::ready)
        drop(gen, fmt::format("no reply within {} ms (the store timeout): the server is hung or unreachable",
                              timeout.count()));
      try {
        out.push_back(futures[i].get());
      } catch (const StoreError& e) {
        throw StoreError(fmt::format("TCPStore {}: {} during {}", endpoint_, e.what(), context_of(requests[i])));
      }
    }
    return out;
  }

  // A request without a reply: returns once it is queued.
  void send(const Request& r, Duration connect_timeout) {
    refuse_on_loop(r);
    std::unique_lock lock(mu_);
    connect_locked(lock, connect_timeout);
    enqueue_locked(r, std::nullopt);
    settle_locked();
  }

  // ---- waits ----

  struct Waiter final : OnceWait {
    Waiter(std::weak_ptr<Connection> c, std::vector<std::string> k, WaitDone d)
        : OnceWait(std::move(d)), connection(std::move(c)), keys(std::move(k)) {}
    void cancel() override {
      if (auto c = connection.lock()) c->withdraw(this);
      OnceWait::cancel();
    }
    std::weak_ptr<Connection> connection;
    std::vector<std::string> keys;  // on the wire
    std::uint64_t tag = 0;          // kTagged: its WAIT's (or BARRIER's) tag
    bool polling = false;           // a CHECK of it is in flight
  };

  // `request`: a WAIT, or (kTagged only) a BARRIER: both are answered whenever they complete.
  std::shared_ptr<AsyncWait> wait(Request request, WaitDone done, Duration connect_timeout) {
    auto w = std::make_shared<Waiter>(weak_from_this(), request.keys, std::move(done));
    std::unique_lock lock(mu_);
    connect_locked(lock, connect_timeout);
    if (mode_ == Mode::kTagged) {
      w->tag = enqueue_locked(request, Slot{Slot::kWait, shape_of(request), nullptr, w});
    } else {
      if (request.command != Command::kWait) throw std::logic_error("MuxStore: a BARRIER waits only when tagged");
      waits_.push_back(w);
      if (armed_slot_ != 0) disarm_locked();  // two waits: neither stays on the wire (kPlain), both are polled
      // Polled (kLegacy, or several waits at once): the first look is now, not a poll interval from now.
      if (mode_ == Mode::kLegacy || waits_.size() > 1)
        for (auto& x : waits_) poll_locked(x);
    }
    settle_locked();
    return w;
  }

  void connect(Duration connect_timeout) {
    std::unique_lock lock(mu_);
    connect_locked(lock, connect_timeout);
  }

  // ---- ON_CLOSE ----

  void on_close(const std::string& wire_key, std::string on_close, std::string on_reconnect, Duration timeout,
                Duration connect_timeout) {
    call({.command = Command::kOnClose, .keys = {wire_key}, .values = {on_close}, .integer = 1}, timeout,
         connect_timeout);
    std::lock_guard lock(mu_);
    on_close_[wire_key] = {std::move(on_close), std::move(on_reconnect)};
  }

  void cancel_on_close(const std::string& wire_key, Duration timeout, Duration connect_timeout) {
    {
      std::lock_guard lock(mu_);
      if (on_close_.erase(wire_key) == 0 || !connected_) return;
    }
    call({.command = Command::kOnClose, .keys = {wire_key}, .values = {""}, .integer = 0}, timeout, connect_timeout);
  }

  // ---- ON_SILENCE ----

  static Request silence_request(const std::string& wire_key, const OnSilence& s) {
    return {.command = Command::kOnSilence,
            .keys = {wire_key},
            .values = {s.silent, s.back},
            .integer = static_cast<std::int64_t>(s.timeout.count())};
  }

  void on_silence(const std::string& wire_key, OnSilence s, Duration timeout, Duration connect_timeout) {
    call(silence_request(wire_key, s), timeout, connect_timeout);
    std::lock_guard lock(mu_);
    on_silence_[wire_key] = std::move(s);
  }

  void cancel_on_silence(const std::string& wire_key, Duration timeout, Duration connect_timeout) {
    {
      std::lock_guard lock(mu_);
      if (on_silence_.erase(wire_key) == 0 || !connected_) return;
    }
    call(silence_request(wire_key, OnSilence{}), timeout, connect_timeout);
  }

  // ---- lifetime ----

  // The last view is gone: fail what is pending and close.
  void shutdown() {
    Completions done;
    {
      std::lock_guard lock(mu_);
      closed_ = true;
      fail_locked("the store client was closed", done);
    }
    run(done);
  }

 private:
  // A reply owed by the server: the next in order (kPlain, kLegacy), or the one under a tag (kTagged).
  struct Slot {
    enum Kind : std::uint8_t {
      kCall,     // a caller's request: `promise`
      kWait,     // the WAIT of `waiter` (kPlain: its 00, or 01 if the CANCEL_WAIT behind it came first; kTagged: its
                 // 00 whenever it completes; also a BARRIER)
      kCancel,   // kPlain: a CANCEL_WAIT (01); kTagged: a withdrawn wait (01 under its tag, maybe after its 00)
      kPoll,     // a CHECK of `waiter`
      kDiscard,  // the reply of a request of the connection's own (ON_CLOSE restored after a reconnect)
    } kind;
    Request shape;
    std::shared_ptr<std::promise<Reply>> promise;
    std::shared_ptr<Waiter> waiter;
    std::uint64_t id = 0;  // kWait: tells the WAIT last on the wire from an older one of the same wait
  };
  struct OnClose {
    std::string on_close, on_reconnect;
  };

  using Completions = std::vector<std::pair<std::shared_ptr<Waiter>, std::pair<WaitOutcome, std::string>>>;

  static void run(Completions& done) {
    for (auto& [w, outcome] : done) w->finish(outcome.first, outcome.second);
    done.clear();
  }

  void refuse_on_loop(const Request& r) const {
    if (loop_.on_loop_thread())
      throw std::logic_error(fmt::format("MuxStore: {} called on the store's I/O thread (from a wait's `done`?)",
                                         protocol::command_name(r.command)));
  }

  // ---- writing (mu_ held) ----

  // Queues r (kTagged: under a new tag, which it returns) and what its reply is owed to.
  std::uint64_t enqueue_locked(const Request& r, std::optional<Slot> slot) {
    if (mode_ == Mode::kTagged) {
      const std::uint64_t tag = next_tag_++;
      protocol::encode_tagged_request(tag, r, outbox_);
      if (slot) tagged_.emplace(tag, std::move(*slot));
      return tag;
    }
    // kPlain: a WAIT on the wire must stay the last request. Withdraw it first; it goes out again behind r.
    if (armed_slot_ != 0) disarm_locked();
    protocol::encode_request(dialect_, r, outbox_);
    if (slot) inorder_.push_back(std::move(*slot));
    return 0;
  }

  void disarm_locked() {
    protocol::encode_request(dialect_, {.command = Command::kCancelWait}, outbox_);
    inorder_.push_back(Slot{Slot::kCancel, {.command = Command::kCancelWait}, nullptr, nullptr});
    armed_.reset();
    armed_slot_ = 0;
  }

  // After any change: kPlain puts a lone wait on the wire; several waits (and kLegacy) are polled.
  void settle_locked() {
    std::erase_if(waits_, [](const std::shared_ptr<Waiter>& w) { return w->finished(); });
    if (armed_slot_ != 0 && (!armed_ || armed_->finished())) disarm_locked();  // done or cancelled, still on the wire
    if (mode_ == Mode::kPlain && !armed_ && armed_slot_ == 0 && waits_.size() == 1 && !waits_[0]->polling) {
      armed_ = waits_[0];
      armed_slot_ = next_slot_++;
      protocol::encode_request(dialect_, {.command = Command::kWait, .keys = armed_->keys}, outbox_);
      inorder_.push_back(Slot{Slot::kWait, {.command = Command::kWait}, nullptr, armed_, armed_slot_});
    }
    const bool poll = mode_ == Mode::kLegacy ? !waits_.empty() : (mode_ == Mode::kPlain && waits_.size() > 1);
    if (poll && !poll_scheduled_) schedule_poll_locked();
    flush_locked();
  }

  void flush_locked() {
    if (writing_ || !link_ || outbox_.empty()) return;
    while (!outbox_.empty()) {
      ssize_t n = ::send(fd_, outbox_.data(), outbox_.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
      if (n > 0) {
        outbox_.erase(0, static_cast<std::size_t>(n));
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
        // The socket is full: the loop writes the rest once it drains (asio's socket is touched on the loop only).
        writing_ = true;
        asio::post(loop_.io(), [self = shared_from_this(), link = link_, gen = gen_] {
          link->socket.async_wait(asio::ip::tcp::socket::wait_write, [self, gen](boost::system::error_code) {
            std::lock_guard lock(self->mu_);
            if (gen != self->gen_) return;
            self->writing_ = false;
            self->flush_locked();
          });
        });
        return;
      }
      // The reader sees the same error and fails what is in flight.
      ::shutdown(fd_, SHUT_RDWR);
      return;
    }
  }

  void schedule_poll_locked() {
    poll_scheduled_ = true;
    auto timer = std::make_shared<asio::steady_timer>(loop_.io(), kPollInterval);
    timer->async_wait([self = shared_from_this(), timer, gen = gen_](boost::system::error_code) {
      std::lock_guard lock(self->mu_);
      self->poll_scheduled_ = false;
      if (gen != self->gen_ || !self->connected_) return;
      if (self->mode_ == Mode::kLegacy || self->waits_.size() > 1)
        for (auto& w : self->waits_) self->poll_locked(w);
      self->settle_locked();
    });
  }

  void poll_locked(const std::shared_ptr<Waiter>& w) {
    if (w->polling || w->finished()) return;
    w->polling = true;
    Request check{.command = Command::kCheck, .keys = w->keys};
    enqueue_locked(check, Slot{Slot::kPoll, shape_of(check), nullptr, w});
  }

  void withdraw(Waiter* w) {
    std::lock_guard lock(mu_);
    if (mode_ == Mode::kTagged) {
      // CANCEL_WAIT under the wait's own tag; the store answers 01 under it (after the 00 if that was on its way).
      auto it = tagged_.find(w->tag);
      if (it == tagged_.end() || it->second.kind != Slot::kWait || it->second.waiter.get() != w) return;
      it->second.kind = Slot::kCancel;
      it->second.waiter.reset();
      protocol::encode_tagged_request(w->tag, {.command = Command::kCancelWait}, outbox_);
      flush_locked();
      return;
    }
    // Marked finished by the caller right after this; settle drops it (and withdraws its WAIT from the wire).
    std::erase_if(waits_, [w](const std::shared_ptr<Waiter>& x) { return x.get() == w; });
    if (armed_.get() == w && armed_slot_ != 0) disarm_locked();
    if (connected_) settle_locked();
  }

  // ---- connecting (mu_ held by `lock`; released while a handshake blocks) ----

  void connect_locked(std::unique_lock<std::mutex>& lock, Duration connect_timeout) {
    if (closed_) throw StoreError("the store client was closed");
    if (connected_) return;
    const auto deadline = deadline_after(connect_timeout);
    lock.unlock();
    std::unique_lock<std::timed_mutex> connecting(connect_mu_, std::defer_lock);
    if (!connecting.try_lock_until(deadline)) {
      lock.lock();
      if (connected_) return;
      throw StoreError(fmt::format("could not reconnect to the TCPStore at {} within {} ms (last error: {})", endpoint_,
                                   connect_timeout.count(), last_error_));
    }
    lock.lock();
    if (connected_) return;
    lock.unlock();
    Handshake h = connect_with_retries(deadline, connect_timeout);
    lock.lock();
    install_locked(h);
  }

  Handshake connect_with_retries(TimePoint deadline, Duration connect_timeout) {
    ConnectBackoff backoff;
    int attempts = 0;
    std::string last_error;
    bool reached_server = false;
    for (;;) {
      ++attempts;
      try {
        return handshake(deadline, reached_server);
      } catch (const RefusedError&) {
        throw;
      } catch (const StoreAuthError&) {
        throw;  // retrying with the same secret cannot help
      } catch (const StoreError& e) {
        last_error = e.what();
        std::lock_guard lock(mu_);
        last_error_ = last_error;
      }
      const auto now = Clock::now();
      if (now >= deadline) break;
      std::this_thread::sleep_for(std::min<Clock::duration>(backoff.next(), deadline - now));
    }
    std::string hint =
        "Check that the store server (ctstore, or the agent hosting it) is running and listening there, that host "
        "and port are right, and that no firewall blocks the port";
    if (reached_server) hint += "; neither the v2 nor the legacy (torch <= 2.0) dialect was answered";
    throw StoreError(
        fmt::format("could not connect to the TCPStore at {} within {} ms ({} attempts; last error: {}). "
                    "{}.",
                    endpoint_, connect_timeout.count(), attempts, last_error, hint));
  }

  // One connection and its handshake: v2's VALIDATE + PING (asking for ctrun's features); if the server closes the
  // connection on it (torch <= 2.0 reads VALIDATE as a SET with an impossible key length), the legacy dialect,
  // checked with GETNUMKEYS. The dialect found is kept for every later connection.
  Handshake handshake(TimePoint deadline, bool& reached_server) {
    Dialect dialect;
    bool detect;
    {
      std::lock_guard lock(mu_);
      dialect = dialect_;
      detect = detect_;
    }
    Handshake h;
    h.fd = connect_tcp(options_.host, options_.port, deadline);
    auto fail = [&](const std::string& why) {
      ::close(h.fd);
      throw StoreError(why);
    };
    if (options_.secret) prove_secret(h.fd, deadline);
    const auto probe = std::min<TimePoint>(deadline, Clock::now() + kDetectTimeout);
    bool closed = false;
    if (dialect == Dialect::kV2) {
      reached_server = true;
      const std::uint32_t nonce = static_cast<std::uint32_t>(::getpid()) | 0x00800000u | protocol::kPingAskFeatures;
      std::string hello;
      protocol::encode_request(Dialect::kV2, {.command = Command::kValidate, .u32 = protocol::kValidationMagic}, hello);
      protocol::encode_request(Dialect::kV2, {.command = Command::kPing, .u32 = nonce}, hello);
      std::uint8_t b[4];
      try {
        send_all(h.fd, hello, deadline);
        recv_exact(h.fd, b, 4, detect ? probe : deadline, closed);
      } catch (const StoreError& e) {
        ::close(h.fd);
        if (!(detect && closed)) throw;
        log::get("store")->debug("TCPStore {}: no v2 PING reply ({}); trying the legacy dialect", endpoint_, e.what());
        return legacy_handshake(deadline);
      }
      const auto reply = protocol::get_u32(b);
      if (reply == protocol::kRefusalMarker) refused(h.fd, deadline);
      if (auth::is_handshake(b, sizeof b)) {  // a store with a secret refused this client, which has none
        ::close(h.fd);
        throw StoreAuthError(auth::client_words(auth::Failure::kSecretRequired, "the store at " + endpoint_));
      }
      if ((reply & ((1u << protocol::kFeatureShift) - 1)) != nonce)
        fail(fmt::format("PING returned {} instead of the nonce {}", reply, nonce));
      h.features = protocol::announced_features(nonce, reply);
      h.dialect = Dialect::kV2;
      if ((h.features & protocol::kFeatureMultiplex) != 0 && options_.tagged) {
        // Tagged mode: asked only of a server that announced it (torch's would close the connection on it).
        std::string multiplex;
        protocol::encode_request(Dialect::kV2, {.command = Command::kMultiplex, .u32 = protocol::kMultiplexVersion},
                                 multiplex);
        try {
          send_all(h.fd, multiplex, deadline);
          recv_exact(h.fd, b, 4, deadline, closed);
        } catch (const StoreError& e) {
          fail(fmt::format("MULTIPLEX (tagged mode) was not answered: {}", e.what()));
        }
        const auto granted = protocol::get_u32(b);
        if (granted != protocol::kMultiplexVersion)
          fail(fmt::format("MULTIPLEX granted tagged mode version {}, this client speaks {}", granted,
                           protocol::kMultiplexVersion));
        h.tagged = true;
      }
      return h;
    }
    ::close(h.fd);
    return legacy_handshake(deadline);
  }

  // The job's secret proved before the first request (common/auth/handshake.hpp); a permanent refusal (another
  // secret, none) is not retried.
  void prove_secret(int fd, TimePoint deadline) {
    try {
      auth::prove_to_server(fd, *options_.secret, auth::Purpose::kStore, deadline, "the store at " + endpoint_);
    } catch (const auth::AuthError& e) {
      ::close(fd);
      if (e.permanent()) throw StoreAuthError(e.what());
      throw StoreError(e.what());
    }
  }

  Handshake legacy_handshake(TimePoint deadline) {
    Handshake h;
    h.dialect = Dialect::kLegacy;
    h.fd = connect_tcp(options_.host, options_.port, deadline);
    std::string probe;
    protocol::encode_request(Dialect::kLegacy, {.command = Command::kGetNumKeys}, probe);
    std::uint8_t b[8];
    bool closed = false;
    try {
      send_all(h.fd, probe, deadline);
      recv_exact(h.fd, b, 8, std::min<TimePoint>(deadline, Clock::now() + kDetectTimeout), closed);
    } catch (const StoreError&) {
      ::close(h.fd);
      throw;
    }
    return h;
  }

  [[noreturn]] void refused(int fd, TimePoint deadline) {
    std::string reason = "no reason given";
    try {
      bool closed = false;
      std::uint8_t len_bytes[8];
      recv_exact(fd, len_bytes, 8, deadline, closed);
      const auto len = std::min<std::uint64_t>(protocol::get_u64(len_bytes), 4096);
      std::string text(static_cast<std::size_t>(len), '\0');
      recv_exact(fd, reinterpret_cast<std::uint8_t*>(text.data()), text.size(), deadline, closed);
      reason = std::move(text);
    } catch (const StoreError&) {
      // the server closed right after the reason
    }
    ::close(fd);
    throw RefusedError(fmt::format("the TCPStore at {} refuses connections: {}", endpoint_, reason), reason);
  }

  void install_locked(const Handshake& h) {
    const bool first = !connected_once_;
    if (detect_ && h.dialect == Dialect::kLegacy)
      log::get("store")->info("TCPStore {} speaks the legacy dialect (torch <= 2.0's server); using it", endpoint_);
    dialect_ = h.dialect;
    detect_ = false;
    features_ = h.features;
    mode_ = h.dialect == Dialect::kLegacy ? Mode::kLegacy : h.tagged ? Mode::kTagged : Mode::kPlain;
    fd_ = h.fd;
    ++gen_;
    link_ = std::make_shared<Link>(loop_.io());
    boost::system::error_code ec;
    sockaddr_storage local{};
    socklen_t len = sizeof local;
    ::getsockname(fd_, reinterpret_cast<sockaddr*>(&local), &len);
    link_->socket.assign(local.ss_family == AF_INET6 ? asio::ip::tcp::v6() : asio::ip::tcp::v4(), fd_, ec);
    connected_ = true;
    connected_once_ = true;
    // A reconnect: say so in every registered key, then register again (as TcpStore).
    if (!first) {
      for (const auto& [wire, values] : on_close_) {
        enqueue_locked({.command = Command::kAppend, .keys = {wire}, .values = {values.on_reconnect}}, std::nullopt);
        Request reg{.command = Command::kOnClose, .keys = {wire}, .values = {values.on_close}, .integer = 1};
        enqueue_locked(reg, Slot{Slot::kDiscard, shape_of(reg), nullptr, nullptr});
      }
      for (const auto& [wire, values] : on_silence_) {  // the new connection speaks: nothing to say "back"
        Request reg = silence_request(wire, values);
        enqueue_locked(reg, Slot{Slot::kDiscard, shape_of(reg), nullptr, nullptr});
      }
    }
    if (first && options_.add_init_key) {
      // Like torch's TCPStore(world_size=N): only on the first connection, never again on a reconnect.
      Request init{.command = Command::kAdd, .keys = {"init/"}, .integer = 1};
      enqueue_locked(init, Slot{Slot::kDiscard, shape_of(init), nullptr, nullptr});
    }
    flush_locked();
    asio::post(loop_.io(), [self = shared_from_this(), link = link_, gen = gen_] { self->read(link, gen); });
  }

  // ---- reading (the loop thread) ----

  void read(const std::shared_ptr<Link>& link, std::uint64_t gen) {
    std::lock_guard lock(mu_);
    if (gen != gen_) return;
    auto& l = *link;
    if (l.rbuf.size() - l.rend < kReadChunk / 4) {
      if (l.rpos > 0) {
        std::memmove(l.rbuf.data(), l.rbuf.data() + l.rpos, l.rend - l.rpos);
        l.rend -= l.rpos;
        l.rpos = 0;
      }
      if (l.rbuf.size() - l.rend < kReadChunk / 4) l.rbuf.resize(l.rbuf.size() * 2);
    }
    l.socket.async_read_some(asio::buffer(l.rbuf.data() + l.rend, l.rbuf.size() - l.rend),
                             [self = shared_from_this(), link, gen](boost::system::error_code ec, std::size_t n) {
                               self->on_read(link, gen, ec, n);
                             });
  }

  void on_read(const std::shared_ptr<Link>& link, std::uint64_t gen, boost::system::error_code ec, std::size_t n) {
    Completions done;
    {
      std::lock_guard lock(mu_);
      if (gen != gen_) return;
      if (ec) {
        fail_locked(
            ec == asio::error::eof
                ? std::string("the server closed the connection (it exited, or rejected a request: see its log)")
                : fmt::format("the connection failed ({})", ec.message()),
            done);
      } else {
        link->rend += n;
        std::string error;
        if (!parse_locked(*link, done, error)) fail_locked(error, done);
      }
    }
    run(done);
    if (!ec) read(link, gen);
  }

  // Takes every whole reply out of the buffer. False (with `error`) on a stream that is not what was asked for.
  bool parse_locked(Link& l, Completions& done, std::string& error) {
    if (mode_ == Mode::kTagged) return parse_tagged_locked(l, done, error);
    for (;;) {
      auto unread = std::span<const std::uint8_t>(l.rbuf.data() + l.rpos, l.rend - l.rpos);
      // (A reply may be empty: a MULTI_GET of no keys. The codec says so on an empty buffer.)
      if (unread.empty() && inorder_.empty()) break;
      if (inorder_.empty()) return error = "a reply nobody asked for", false;
      auto& slot = inorder_.front();
      if (slot.kind == Slot::kWait || slot.kind == Slot::kCancel) {
        if (unread.empty()) break;
        const auto r = unread[0];
        if (slot.kind == Slot::kCancel) {
          if (r != static_cast<std::uint8_t>(protocol::WaitResponse::kWaitCanceled))
            return error = fmt::format("CANCEL_WAIT answered {}", r), false;
          inorder_.pop_front();
        } else if (r == static_cast<std::uint8_t>(protocol::WaitResponse::kStopWaiting)) {
          finish_plain_locked(slot.waiter, slot.id, done);
          inorder_.pop_front();
        } else {
          // 01: the CANCEL_WAIT behind the WAIT was answered first: the wait did not complete (it is sent again).
          if (inorder_.size() < 2 || inorder_[1].kind != Slot::kCancel)
            return error = fmt::format("WAIT answered {}", r), false;
          inorder_.pop_front();
          inorder_.pop_front();
        }
        l.rpos += 1;
        continue;
      }
      auto pr = protocol::parse_reply(dialect_, slot.shape, unread, kMaxReplyBytes);
      if (pr.status == protocol::ParseStatus::kError)
        return error = fmt::format("unexpected reply to {}: {}", protocol::command_name(slot.shape.command), pr.error),
               false;
      if (pr.status == protocol::ParseStatus::kNeedMore) {
        if (l.rpos + pr.need_at_least > l.rbuf.size()) l.rbuf.resize(l.rpos + pr.need_at_least);
        break;
      }
      l.rpos += pr.consumed;
      Slot s = std::move(slot);
      inorder_.pop_front();
      if (s.kind == Slot::kCall) {
        s.promise->set_value(std::move(pr.reply));
      } else if (s.kind == Slot::kPoll) {
        s.waiter->polling = false;
        if (pr.reply.u8 == static_cast<std::uint8_t>(protocol::CheckResponse::kReady))
          finish_plain_locked(s.waiter, 0, done);
      }
    }
    if (l.rpos == l.rend) l.rpos = l.rend = 0;
    settle_locked();
    return true;
  }

  // kTagged: every whole frame in the buffer goes to what its tag is owed to, in whatever order they come.
  bool parse_tagged_locked(Link& l, Completions& done, std::string& error) {
    const protocol::SentLookup sent = [this](std::uint64_t tag) -> const Request* {
      auto it = tagged_.find(tag);
      return it == tagged_.end() ? nullptr : &it->second.shape;
    };
    while (l.rpos < l.rend) {
      auto unread = std::span<const std::uint8_t>(l.rbuf.data() + l.rpos, l.rend - l.rpos);
      auto frame = protocol::parse_tagged_reply(unread, sent, kMaxReplyBytes);
      if (frame.status == protocol::ParseStatus::kError)
        return error = fmt::format("unexpected reply frame: {}", frame.error), false;
      if (frame.status == protocol::ParseStatus::kNeedMore) {
        if (l.rpos + frame.need_at_least > l.rbuf.size()) l.rbuf.resize(l.rpos + frame.need_at_least);
        break;
      }
      l.rpos += frame.consumed;
      auto it = tagged_.find(frame.tag);
      if (frame.frame == protocol::FrameStatus::kRefused) {
        // The store refused one request and goes on serving the others on this connection.
        if (it == tagged_.end()) {  // a request without a reply (SET, APPEND, ...): its caller has returned
          log::get("store")->error("TCPStore {}: the store refused a request that has no reply: {}", endpoint_,
                                   frame.refusal);
          continue;
        }
        Slot s = std::move(it->second);
        tagged_.erase(it);
        const auto why = fmt::format("the store refused the request: {}", frame.refusal);
        if (s.kind == Slot::kCall) s.promise->set_exception(std::make_exception_ptr(StoreError(why)));
        if (s.kind == Slot::kWait)
          done.push_back({s.waiter, {WaitOutcome::kFailed, fmt::format("TCPStore {}: {}", endpoint_, why)}});
        continue;
      }
      Slot& s = it->second;  // known: parse_tagged_reply checked the tag
      const bool stop = frame.reply.u8 == static_cast<std::uint8_t>(protocol::WaitResponse::kStopWaiting);
      switch (s.kind) {
        case Slot::kCall:
          s.promise->set_value(std::move(frame.reply));
          break;
        case Slot::kWait:
          if (!stop) return error = fmt::format("a wait not withdrawn was answered {}", frame.reply.u8), false;
          done.push_back({s.waiter, {WaitOutcome::kReady, {}}});
          break;
        case Slot::kCancel:
          if (stop) continue;  // it completed before the CANCEL_WAIT arrived: the 01 follows
          break;
        default:  // kDiscard
          break;
      }
      tagged_.erase(it);
    }
    if (l.rpos == l.rend) l.rpos = l.rend = 0;
    return true;
  }

  // A plain wait's keys are there (its WAIT `slot` answered 00, or a poll found them).
  void finish_plain_locked(const std::shared_ptr<Waiter>& w, std::uint64_t slot, Completions& done) {
    if (slot != 0 && slot == armed_slot_) {  // the WAIT last on the wire: nothing is on the wire now
      armed_.reset();
      armed_slot_ = 0;
    }
    std::erase(waits_, w);
    if (!w->finished()) done.push_back({w, {WaitOutcome::kReady, {}}});
  }

 public:
  // Drops the connection `gen` (if it is still the current one): the server did not answer in time.
  void drop(std::uint64_t gen, const std::string& why) {
    Completions done;
    {
      std::lock_guard lock(mu_);
      if (gen != gen_ || !connected_) return;
      fail_locked(why, done);
    }
    run(done);
  }

 private:
  void fail_locked(const std::string& why, Completions& done) {
    for (auto& s : inorder_)
      if (s.kind == Slot::kCall) s.promise->set_exception(std::make_exception_ptr(StoreError(why)));
    const auto error = fmt::format("TCPStore {}: {}", endpoint_, why);
    for (auto& [tag, s] : tagged_) {
      if (s.kind == Slot::kCall) s.promise->set_exception(std::make_exception_ptr(StoreError(why)));
      if (s.kind == Slot::kWait) done.push_back({s.waiter, {WaitOutcome::kFailed, error}});
    }
    for (auto& w : waits_) done.push_back({w, {WaitOutcome::kFailed, error}});
    inorder_.clear();
    tagged_.clear();
    waits_.clear();
    armed_.reset();
    outbox_.clear();
    writing_ = false;
    poll_scheduled_ = false;
    if (connected_) last_error_ = why;
    connected_ = false;
    ++gen_;
    armed_slot_ = 0;
    // The socket belongs to the loop: closed there (its pending read ends with operation_aborted).
    if (link_) {
      asio::post(loop_.io(), [link = std::move(link_)] {
        boost::system::error_code ec;
        link->socket.close(ec);
      });
    }
    link_.reset();
    fd_ = -1;
  }

  MuxStore::Options options_;
  ClientLoop& loop_;
  mutable std::mutex mu_;
  std::timed_mutex connect_mu_;  // one handshake at a time
  Dialect dialect_;
  bool detect_;
  std::string endpoint_;
  Mode mode_ = Mode::kPlain;
  std::uint32_t features_ = 0;
  bool connected_ = false;
  bool connected_once_ = false;
  bool closed_ = false;
  std::uint64_t gen_ = 0;  // bumped by every (dis)connection: handlers of an older one do nothing
  std::string last_error_;
  int fd_ = -1;                 // link_'s, for writes from callers' threads
  std::shared_ptr<Link> link_;  // the current connection (null: none)
  std::uint64_t next_slot_ = 1;
  std::uint64_t armed_slot_ = 0;  // kPlain: the id of the WAIT slot that is the last request on the wire (0: none)
  std::string outbox_;
  bool writing_ = false;
  std::deque<Slot> inorder_;
  std::uint64_t next_tag_ = 1;                         // kTagged: the next request's tag
  std::unordered_map<std::uint64_t, Slot> tagged_;     // kTagged: what each tag in flight is owed
  std::vector<std::shared_ptr<Waiter>> waits_;                               // kPlain, kLegacy: pending waits
  std::shared_ptr<Waiter> armed_;                                            // kPlain: the wait whose WAIT is last
  bool poll_scheduled_ = false;
  std::map<std::string, OnClose> on_close_;      // wire key -> values, while registered
  std::map<std::string, OnSilence> on_silence_;  // wire key -> values, while registered
};

// ---------------------------------------------------------------------------------------------------------------

MuxStore::MuxStore(Options options, std::shared_ptr<ClientLoop> loop)
    : timeout_ms_(options.timeout.count()), connect_timeout_ms_(options.connect_timeout.count()) {
  if (!loop) loop = std::make_shared<ClientLoop>();
  connection_ = std::make_shared<Connection>(options, *loop);
  // When the last view goes: the connection fails what is pending and closes, then the loop is released (a loop of
  // this store's own stops here, on this thread, never on its own).
  life_ = std::shared_ptr<void>(nullptr, [c = connection_, loop](void*) { c->shutdown(); });
  connection_->connect(options.connect_timeout);  // now, so that a wrong endpoint fails here as with TcpStore
}

MuxStore::MuxStore(std::shared_ptr<Connection> connection, std::shared_ptr<void> life, Duration timeout,
                   Duration connect_timeout)
    : connection_(std::move(connection)),
      life_(std::move(life)),
      timeout_ms_(timeout.count()),
      connect_timeout_ms_(connect_timeout.count()) {}

MuxStore::~MuxStore() = default;

std::shared_ptr<MuxStore> MuxStore::view(Duration timeout, Duration connect_timeout) {
  return std::shared_ptr<MuxStore>(new MuxStore(connection_, life_, timeout, connect_timeout));
}

Duration MuxStore::timeout() const { return Duration(timeout_ms_.load(std::memory_order_relaxed)); }
void MuxStore::set_timeout(Duration t) { timeout_ms_.store(t.count(), std::memory_order_relaxed); }
void MuxStore::set_connect_timeout(Duration t) { connect_timeout_ms_.store(t.count(), std::memory_order_relaxed); }
MuxStore::Mode MuxStore::mode() const { return connection_->mode(); }
protocol::Dialect MuxStore::dialect() const { return connection_->dialect(); }
const std::string& MuxStore::endpoint() const { return connection_->endpoint(); }

Reply MuxStore::call(Request request) {
  return connection_->call(request, timeout(), Duration(connect_timeout_ms_.load(std::memory_order_relaxed)));
}

void MuxStore::send(Request request) {
  connection_->send(request, Duration(connect_timeout_ms_.load(std::memory_order_relaxed)));
}

std::string MuxStore::wire(const std::string& key) const { return connection_->options().key_prefix + key; }

std::vector<std::string> MuxStore::wire(const std::vector<std::string>& keys) const {
  std::vector<std::string> out;
  out.reserve(keys.size());
  for (const auto& k : keys) out.push_back(wire(k));
  return out;
}

void MuxStore::require_v2(Command c) const {
  if (dialect() != Dialect::kV2)
    throw StoreError(fmt::format(
        "{} is not supported by the legacy TCPStore dialect (torch <= 2.0 servers); use the v2 dialect with a server "
        "that has it (ctstore, torch >= 2.8)",
        protocol::command_name(c)));
}

void MuxStore::set(const std::string& key, std::string_view value) {
  send({.command = Command::kSet, .keys = {wire(key)}, .values = {std::string(value)}});
}

std::string MuxStore::get(const std::string& key) {
  // As torch: WAIT first, because a GET of a missing key makes torch's servers close the connection.
  wait({key}, timeout());
  return std::move(call({.command = Command::kGet, .keys = {wire(key)}}).values[0]);
}

std::string MuxStore::compare_set(const std::string& key, std::string_view expected, std::string_view desired) {
  return std::move(call({.command = Command::kCompareSet,
                         .keys = {wire(key)},
                         .values = {std::string(expected), std::string(desired)}})
                       .values[0]);
}

std::int64_t MuxStore::add(const std::string& key, std::int64_t delta) {
  return call({.command = Command::kAdd, .keys = {wire(key)}, .integer = delta}).integer;
}

bool MuxStore::check(const std::vector<std::string>& keys) {
  auto r = call({.command = Command::kCheck, .keys = wire(keys)}).u8;
  return r == static_cast<std::uint8_t>(protocol::CheckResponse::kReady);
}

void MuxStore::wait(const std::vector<std::string>& keys, Duration timeout) {
  auto result = std::make_shared<std::promise<std::pair<WaitOutcome, std::string>>>();
  auto future = result->get_future();
  auto w = connection_->wait(
      {.command = Command::kWait, .keys = wire(keys)},
      [result](WaitOutcome o, const std::string& e) {
        result->set_value({o, e});
      },
      Duration(connect_timeout_ms_.load(std::memory_order_relaxed)));
  if (future.wait_until(deadline_after(timeout)) != std::future_status::ready) w->cancel();
  auto [outcome, error] = future.get();
  if (outcome == WaitOutcome::kReady) return;
  if (outcome == WaitOutcome::kFailed) throw StoreError(error);
  throw TimeoutError(wait_timeout_message(keys, timeout));
}

std::shared_ptr<AsyncWait> MuxStore::wait_async(const std::vector<std::string>& keys, WaitDone done) {
  return connection_->wait({.command = Command::kWait, .keys = wire(keys)}, std::move(done),
                           Duration(connect_timeout_ms_.load(std::memory_order_relaxed)));
}

std::vector<std::optional<std::string>> MuxStore::peek(const std::vector<std::string>& keys,
                                                       std::string_view sentinel) {
  std::vector<std::optional<std::string>> out;
  out.reserve(keys.size());
  if (keys.size() > 1 && keys.size() <= protocol::kMaxPeekKeys && dialect() == Dialect::kV2 &&
      connection_->supports(protocol::kFeaturePeek)) {
    // One request for them all (ctrun's PEEK), not one COMPARE_SET per key: the master's work per step.
    auto reply = call({.command = Command::kPeek, .keys = wire(keys), .values = {std::string(sentinel)}});
    for (auto& v : reply.values) out.push_back(v == sentinel ? std::nullopt : std::optional<std::string>(std::move(v)));
    return out;
  }
  std::vector<Request> requests;
  requests.reserve(keys.size());
  for (const auto& k : keys)
    requests.push_back(
        {.command = Command::kCompareSet, .keys = {wire(k)}, .values = {std::string(sentinel), std::string(sentinel)}});
  auto replies = connection_->calls(requests, timeout(), Duration(connect_timeout_ms_.load(std::memory_order_relaxed)));
  for (auto& r : replies)
    out.push_back(r.values[0] == sentinel ? std::nullopt : std::optional<std::string>(std::move(r.values[0])));
  return out;
}

std::int64_t MuxStore::num_keys() { return call({.command = Command::kGetNumKeys}).integer; }

bool MuxStore::delete_key(const std::string& key) {
  return call({.command = Command::kDeleteKey, .keys = {wire(key)}}).integer == 1;
}

void MuxStore::append(const std::string& key, std::string_view value) {
  if (dialect() == Dialect::kV2) {
    send({.command = Command::kAppend, .keys = {wire(key)}, .values = {std::string(value)}});
    return;
  }
  static const std::string nonce = append_probe_nonce();
  append_by_compare_set(
      [this](const std::string& k, std::string_view e, std::string_view d) { return compare_set(k, e, d); }, key, value,
      nonce);
}

std::vector<std::string> MuxStore::multi_get(const std::vector<std::string>& keys) {
  if (keys.empty()) return {};
  if (dialect() != Dialect::kV2) {
    std::vector<std::string> out;
    out.reserve(keys.size());
    for (const auto& k : keys) out.push_back(get(k));
    return out;
  }
  // As torch: wait for every key first, so that MULTI_GET never hits a missing key.
  wait(keys, timeout());
  return std::move(call({.command = Command::kMultiGet, .keys = wire(keys)}).values);
}

void MuxStore::multi_set(const std::vector<std::string>& keys, const std::vector<std::string>& values) {
  check_multi_set_sizes(keys, values);
  if (dialect() != Dialect::kV2) {
    for (std::size_t i = 0; i < keys.size(); ++i) set(keys[i], values[i]);
    return;
  }
  send({.command = Command::kMultiSet, .keys = wire(keys), .values = values});
}

void MuxStore::queue_push(const std::string& key, std::string_view value) {
  require_v2(Command::kQueuePush);
  send({.command = Command::kQueuePush, .keys = {wire(key)}, .values = {std::string(value)}});
}

std::optional<std::string> MuxStore::queue_pop(const std::string& key, bool block) {
  require_v2(Command::kQueuePop);
  // A non-empty queue counts as a present key for WAIT (as torch's libuv server), so blocking is a wait.
  if (block) wait({key}, timeout());
  auto reply = call({.command = Command::kQueuePop, .keys = {wire(key)}});
  if (reply.integer <= 0) return std::nullopt;
  return std::move(reply.values[0]);
}

std::int64_t MuxStore::queue_len(const std::string& key) {
  require_v2(Command::kQueueLen);
  return call({.command = Command::kQueueLen, .keys = {wire(key)}}).integer;
}

std::vector<std::string> MuxStore::list_keys() {
  require_v2(Command::kListKeys);
  auto reply = call({.command = Command::kListKeys});
  std::vector<std::string> out;
  const auto& prefix = connection_->options().key_prefix;
  for (auto& k : reply.values)
    if (k.size() >= prefix.size() && k.compare(0, prefix.size(), prefix) == 0) out.push_back(k.substr(prefix.size()));
  return out;
}

void MuxStore::barrier(const std::string& key, std::int64_t world_size, Duration timeout) {
  // A BARRIER's reply comes whenever the count is reached: a frame of its own when tagged, but nothing torch's servers
  // could answer in between other replies. There (and on torch <= 2.0) it is torch 1.13's ADD polling, which
  // leaves the same count in the key.
  if (mode() != Mode::kTagged) {
    barrier_by_add([this](const std::string& k, std::int64_t d) { return add(k, d); }, key, world_size, timeout);
    return;
  }
  auto result = std::make_shared<std::promise<std::pair<WaitOutcome, std::string>>>();
  auto future = result->get_future();
  auto w = connection_->wait(
      {.command = Command::kBarrier, .keys = {wire(key)}, .integer = world_size},
      [result](WaitOutcome o, const std::string& e) {
        result->set_value({o, e});
      },
      Duration(connect_timeout_ms_.load(std::memory_order_relaxed)));
  if (future.wait_until(deadline_after(timeout)) != std::future_status::ready) w->cancel();
  auto [outcome, error] = future.get();
  if (outcome == WaitOutcome::kReady) return;
  if (outcome == WaitOutcome::kFailed) throw StoreError(error);
  throw TimeoutError(fmt::format(
      "barrier on key '{}' timed out after {} ms waiting for {} participants. Check that every participant started "
      "and reached the barrier, or raise the timeout.",
      printable_key(key), timeout.count(), world_size));
}

bool MuxStore::append_on_close(const std::string& key, std::string_view on_close, std::string_view on_reconnect) {
  if (dialect() != Dialect::kV2 || !connection_->supports(protocol::kFeatureOnClose)) return false;
  connection_->on_close(wire(key), std::string(on_close), std::string(on_reconnect), timeout(),
                        Duration(connect_timeout_ms_.load(std::memory_order_relaxed)));
  return true;
}

void MuxStore::cancel_on_close(const std::string& key) {
  connection_->cancel_on_close(wire(key), timeout(), Duration(connect_timeout_ms_.load(std::memory_order_relaxed)));
}

bool MuxStore::append_on_silence(const std::string& key, std::string_view on_silence, std::string_view on_back,
                                 Duration timeout) {
  if (dialect() != Dialect::kV2 || !connection_->supports(protocol::kFeatureOnSilence)) return false;
  connection_->on_silence(wire(key), {std::string(on_silence), std::string(on_back), std::max(timeout, Duration(1))},
                          this->timeout(), Duration(connect_timeout_ms_.load(std::memory_order_relaxed)));
  return true;
}

void MuxStore::cancel_on_silence(const std::string& key) {
  connection_->cancel_on_silence(wire(key), timeout(), Duration(connect_timeout_ms_.load(std::memory_order_relaxed)));
}

void MuxStore::ping() {
  require_v2(Command::kPing);
  const std::uint32_t nonce = static_cast<std::uint32_t>(::getpid()) | 0x00800000u;
  auto echo = call({.command = Command::kPing, .u32 = nonce}).u32;
  if (echo != nonce)
    throw StoreError(fmt::format("TCPStore {}: PING returned {} instead of the nonce {}", endpoint(), echo, nonce));
}

}  // namespace ctrun::store
