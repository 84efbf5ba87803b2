// The store relay: the store's server (server.cpp) whose requests run on an upstream ctrun store over one tagged
// connection. This file holds the upstream connection (dial, handshake, frames in and out, loss); what is sent and
// how replies reach the clients is relay_core.cpp's.
#include "store/relay.hpp"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include <cstring>

#include <fmt/format.h>
#include <boost/asio.hpp>

#include "common/auth/handshake_asio.hpp"
#include "common/log.hpp"
#include "store/backend.hpp"
#include "store/store.hpp"

namespace ctrun::store {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;
using detail::ConnId;

namespace {

// Requests queued for the upstream past this hold the clients that send more, until it drains below kResumeBytes.
constexpr std::size_t kCongestedBytes = 4u << 20;
constexpr std::size_t kResumeBytes = 1u << 20;
constexpr std::size_t kReadChunk = 64 * 1024;
// A silent upstream host (its machine gone, not just its process) is noticed by TCP keepalive after about
// kKeepIdle + kKeepCount * kKeepInterval seconds; a dead process is noticed at once (its kernel closes the socket).
constexpr int kKeepIdle = 5;
constexpr int kKeepInterval = 1;
constexpr int kKeepCount = 5;

void keep_alive(tcp::socket& s) {
  const int fd = s.native_handle();
  const int on = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &on, sizeof on);
  ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &kKeepIdle, sizeof kKeepIdle);
  ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &kKeepInterval, sizeof kKeepInterval);
  ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &kKeepCount, sizeof kKeepCount);
}

}  // namespace

namespace detail {

class RelayBackend final : public Backend, private RelayPort {
 public:
  RelayBackend(FrontEnd& front, const RelayOptions& options)
      : front_(front),
        opts_(options),
        core_(*this, options.server.max_total_bytes),
        socket_(front.loop()),
        resolver_(front.loop()),
        retry_(front.loop()),
        log_(log::get("store")) {}

  // ---- Backend ----
  ExecResult execute(ConnId conn, const protocol::Request& request) override {
    if (state_ == State::kIdle || state_ == State::kLost)
      return {.close = true,
              .reason = state_ == State::kIdle ? std::string("this relay is not pointed at a store yet")
                                               : "this relay lost the job's store (" + lost_reason_ + ")"};
    return core_.execute(conn, request);
  }
  ExecResult step(ConnId conn, const protocol::Request& request) override { return execute(conn, request); }
  void forget(ConnId conn) override { core_.forget(conn); }
  std::uint64_t held_bytes() const override { return core_.held_bytes() + own_bytes(); }
  void set_io_bytes(std::uint64_t bytes) override {
    front_io_ = bytes;
    core_.set_io_bytes(front_io_ + own_bytes());
  }
  void stop() override {
    ++generation_;
    close_socket();
    state_ = State::kIdle;
  }
  BackendStats stats() const override { return {.pending_waits = core_.in_flight()}; }

  // ---- the relay's owner ----
  void connect(const std::string& host, std::uint16_t port) {
    if (state_ != State::kIdle) {
      core_.reset();
      front_.fail_all(fmt::format("the relay is pointed at the store at {}:{} (a new attempt)", host, port));
    }
    ++generation_;
    close_socket();
    host_ = host;
    port_ = port;
    state_ = State::kConnecting;
    deadline_ = std::chrono::steady_clock::now() + opts_.connect_timeout;
    backoff_ = std::chrono::milliseconds(20);
    dial();
  }

  void fill(RelayStats& stats) const {
    stats.counters = core_.counters();
    stats.upstream_ready = state_ == State::kReady;
    stats.upstream = host_.empty() ? std::string() : fmt::format("{}:{}", host_, port_);
    stats.upstream_bytes_out = bytes_out_;
    stats.upstream_bytes_in = bytes_in_;
  }

 private:
  // kProving: the job's handshake (with a secret); kHandshake: VALIDATE + MULTIPLEX, waiting for the granted version.
  enum class State : std::uint8_t { kIdle, kConnecting, kProving, kHandshake, kReady, kLost };

  std::uint64_t own_bytes() const { return out_.capacity() + writing_.capacity() + in_.size(); }
  void account() { core_.set_io_bytes(front_io_ + own_bytes()); }

  template <class Fn>
  auto guarded(Fn fn) {
    return [this, gen = generation_, alive = std::weak_ptr<int>(life_), fn = std::move(fn)](auto&&... args) mutable {
      if (!alive.lock() || gen != generation_) return;
      fn(std::forward<decltype(args)>(args)...);
    };
  }

  void close_socket() {
    boost::system::error_code ec;
    if (auto proving = proving_.lock()) proving->close(ec);  // its handshake ends (guarded: nothing follows)
    proving_.reset();
    resolver_.cancel();
    retry_.cancel();
    socket_.close(ec);
    socket_ = tcp::socket(front_.loop());
    writing_.clear();
    writing_.shrink_to_fit();
    out_.clear();
    out_.shrink_to_fit();
    std::vector<std::uint8_t>().swap(in_);
    in_len_ = 0;
    writing_now_ = false;
    pump_posted_ = false;
  }

  // ---- dialing ----
  void dial() {
    resolver_.async_resolve(host_, std::to_string(port_),
                            guarded([this](boost::system::error_code ec, tcp::resolver::results_type results) {
                              if (ec) return retry_or_give_up(ec.message());
                              asio::async_connect(socket_, results,
                                                  guarded([this](boost::system::error_code e, const tcp::endpoint&) {
                                                    if (e) return retry_or_give_up(e.message());
                                                    connected();
                                                  }));
                            }));
  }

  void retry_or_give_up(const std::string& why) {
    if (std::chrono::steady_clock::now() + backoff_ > deadline_)
      return lose(fmt::format("cannot reach the job's store at {}:{} within {} ms: {}", host_, port_,
                              opts_.connect_timeout.count(), why));
    boost::system::error_code ignored;
    socket_.close(ignored);
    socket_ = tcp::socket(front_.loop());
    retry_.expires_after(backoff_);
    backoff_ = std::min<std::chrono::milliseconds>(backoff_ * 2, std::chrono::milliseconds(1000));
    retry_.async_wait(guarded([this](boost::system::error_code ec) {
      if (!ec) dial();
    }));
  }

  void connected() {
    boost::system::error_code ec;
    socket_.set_option(tcp::no_delay(true), ec);
    keep_alive(socket_);
    if (!opts_.upstream_secret) return speak_tagged();
    // The job's handshake first, on a socket of its own until it is done: a handshake cut short (a new connect(),
    // the relay stopping) closes only that socket, never one dialed since.
    state_ = State::kProving;
    auto proving = std::make_shared<tcp::socket>(std::move(socket_));
    socket_ = tcp::socket(front_.loop());
    proving_ = proving;
    auth::async_prove_to_server(*proving, opts_.upstream_secret, auth::Purpose::kStore,
                                fmt::format("{}:{}", host_, port_), guarded([this, proving](std::string error) {
                                  proving_.reset();
                                  if (!error.empty())
                                    return lose("the job's store turned this node's store relay away: " + error);
                                  socket_ = std::move(*proving);
                                  speak_tagged();
                                }));
  }

  void speak_tagged() {
    // VALIDATE (a v2 connection), then MULTIPLEX: the store answers with the version it grants; a store without
    // ctrun's tagged mode (torch's own server) closes the connection instead.
    std::string hello;
    protocol::encode_request(protocol::Dialect::kV2,
                             {.command = protocol::Command::kValidate, .u32 = protocol::kValidationMagic}, hello);
    protocol::encode_request(protocol::Dialect::kV2,
                             {.command = protocol::Command::kMultiplex, .u32 = protocol::kMultiplexVersion}, hello);
    out_.insert(0, hello);
    state_ = State::kHandshake;
    read();
    write();
  }

  // ---- RelayPort ----
  void send(std::uint64_t tag, const protocol::Request& request) override {
    protocol::encode_tagged_request(tag, request, out_);
    want_pump();
  }
  bool congested() const override { return out_.size() + writing_.size() > kCongestedBytes; }
  void want_flush() override { want_pump(); }
  ReplyBuffer* output(ConnId client) override { return front_.output(client); }
  void resume(ConnId client) override { front_.resume(client); }
  void fail(ConnId client, Refusal kind, const std::string& reason) override { front_.fail(client, kind, reason); }

  // Once per round of the loop's work: the batches due go out, then one write carries everything queued.
  void want_pump() {
    if (pump_posted_) return;
    pump_posted_ = true;
    asio::post(front_.loop(), guarded([this] {
                 pump_posted_ = false;
                 core_.flush_batches();
                 write();
               }));
  }

  // ---- writing ----
  void write() {
    if (writing_now_ || out_.empty() || (state_ != State::kHandshake && state_ != State::kReady)) {
      account();
      return;
    }
    writing_.swap(out_);
    out_.clear();
    writing_now_ = true;
    account();
    asio::async_write(
        socket_, asio::buffer(writing_), guarded([this](boost::system::error_code ec, std::size_t n) {
          writing_now_ = false;
          if (ec) return lose(fmt::format("writing to the job's store at {}:{}: {}", host_, port_, ec.message()));
          bytes_out_ += n;
          writing_.clear();
          if (writing_.capacity() > kReadChunk) std::string().swap(writing_);
          write();
          if (out_.size() + writing_.size() < kResumeBytes) core_.decongested();
        }));
  }

  // ---- reading ----
  void read() {
    if (in_.size() < in_len_ + kReadChunk) {
      // Counted before it grows: a reply is at most a value (and a few lengths) bigger than what is buffered.
      if (front_io_ + core_.held_bytes() + own_bytes() + kReadChunk > opts_.server.max_total_bytes)
        return lose(fmt::format("buffering the store's replies would exceed the relay's memory limit of {} bytes",
                                opts_.server.max_total_bytes));
      in_.resize(std::max(in_len_ + kReadChunk, in_.size() * 2));
      account();
    }
    socket_.async_read_some(
        asio::buffer(in_.data() + in_len_, in_.size() - in_len_),
        guarded([this](boost::system::error_code ec, std::size_t n) {
          in_len_ += n;
          if (ec)
            return lose(ec == asio::error::eof
                            ? fmt::format("the job's store at {}:{} closed the connection", host_, port_)
                            : fmt::format("reading from the job's store at {}:{}: {}", host_, port_, ec.message()));
          bytes_in_ += n;
          if (!take_frames()) return;
          front_.flush();
          read();
        }));
  }

  // Decodes every whole frame buffered; false when the connection was dropped for a frame that makes no sense.
  bool take_frames() {
    std::size_t off = 0;
    const protocol::SentLookup sent = [this](std::uint64_t tag) { return core_.sent(tag); };
    while (off < in_len_) {
      std::span<const std::uint8_t> rest(in_.data() + off, in_len_ - off);
      if (state_ == State::kHandshake) {
        if (rest.size() < 4) break;
        if (auth::is_handshake(rest.data(), rest.size())) {  // a store that requires the secret, which we lack
          state_ = State::kReady;                            // a ctrun store: no "not tagged mode" hint
          lose("the job's store turned this node's store relay away: " +
               auth::client_words(auth::Failure::kSecretRequired, fmt::format("{}:{}", host_, port_)));
          return false;
        }
        const std::uint32_t granted = protocol::get_u32(rest.data());
        if (granted == protocol::kRefusalMarker) {  // the store is at its connection cap and says why
          auto why = protocol::parse_refusal(rest);
          if (!why) break;
          state_ = State::kReady;  // the store answered: not a handshake with something that is not a ctrun store
          lose(fmt::format("the job's store at {}:{} refuses the relay's connection: {}", host_, port_, *why));
          return false;
        }
        off += 4;
        if (granted != protocol::kMultiplexVersion) {
          lose(fmt::format("the store at {}:{} offers tagged mode version {}, this relay speaks {}", host_, port_,
                           granted, protocol::kMultiplexVersion));
          return false;
        }
        state_ = State::kReady;
        log_->debug("store relay: connected to the job's store at {}:{} (tagged mode)", host_, port_);
        continue;
      }
      auto frame = protocol::parse_tagged_reply(rest, sent, opts_.server.limits.max_value_len);
      if (frame.status == protocol::ParseStatus::kNeedMore) break;
      bool known = frame.status == protocol::ParseStatus::kOk;
      if (known) {
        off += frame.consumed;
        known = frame.frame == protocol::FrameStatus::kReply ? core_.on_reply(frame.tag, std::move(frame.reply))
                                                             : core_.on_refused(frame.tag, frame.refusal);
        if (!known) frame.error = fmt::format("a frame for tag {}, which no request in flight carries", frame.tag);
      }
      if (!known) {
        lose(fmt::format("the store at {}:{} sent what the relay cannot read: {}", host_, port_, frame.error));
        return false;
      }
    }
    if (off > 0) {
      std::memmove(in_.data(), in_.data() + off, in_len_ - off);
      in_len_ -= off;
    }
    if (in_len_ == 0 && in_.size() > kReadChunk) std::vector<std::uint8_t>().swap(in_);
    return true;
  }

  // ---- loss ----
  void lose(const std::string& why) {
    if (state_ == State::kLost) return;
    const bool handshaking = state_ == State::kHandshake;
    ++generation_;
    close_socket();
    state_ = State::kLost;
    lost_reason_ = handshaking ? why +
                                     " during the handshake: not a ctrun store with tagged mode (torch's own "
                                     "TCPStore, or an older ctrun on that node?); run the same ctrun on every "
                                     "node, or --store-relay off"
                               : why;
    // Warned when clients are affected; at the end of a job the store goes after its workers, with no one left here.
    if (core_.clients() > 0)
      log_->warn("store relay: {}; closing this node's store connections", lost_reason_);
    else
      log_->debug("store relay: {}", lost_reason_);
    core_.reset();
    front_.fail_all("the store relay lost the job's store");
  }

  FrontEnd& front_;
  const RelayOptions opts_;
  RelayCore core_;
  tcp::socket socket_;
  tcp::resolver resolver_;
  asio::steady_timer retry_;
  State state_ = State::kIdle;
  std::string host_;
  std::uint16_t port_ = 0;
  std::string lost_reason_;
  std::chrono::steady_clock::time_point deadline_{};
  std::chrono::milliseconds backoff_{20};
  std::uint64_t generation_ = 0;  // handlers of an earlier connection do nothing
  std::string out_;               // frames queued
  std::string writing_;           // frames being written
  std::vector<std::uint8_t> in_;  // frames received, not decoded yet: the first in_len_ bytes
  std::size_t in_len_ = 0;
  bool writing_now_ = false;
  bool pump_posted_ = false;
  std::uint64_t front_io_ = 0;
  std::uint64_t bytes_out_ = 0;
  std::uint64_t bytes_in_ = 0;
  std::shared_ptr<int> life_ = std::make_shared<int>(0);
  std::weak_ptr<tcp::socket> proving_;  // the socket of the job's handshake under way (kProving)
  std::shared_ptr<spdlog::logger> log_;
};

}  // namespace detail

class Relay::Impl {
 public:
  Impl(RelayOptions o, asio::io_context* io)
      : options(std::move(o)),
        server(
            server_options(options),
            [this](detail::FrontEnd& front) {
              auto b = std::make_unique<detail::RelayBackend>(front, options);
              backend = b.get();
              return b;
            },
            io) {}

  static ServerOptions server_options(const RelayOptions& o) {
    ServerOptions s = o.server;
    s.on_failure = [](const std::string& what) {
      log::get("store")->error("store relay: its loop failed ({}); this node's workers lose the job's store", what);
    };
    return s;
  }

  RelayOptions options;
  detail::RelayBackend* backend = nullptr;
  Server server;
};

Relay::Relay(RelayOptions options, asio::io_context* io) : impl_(std::make_unique<Impl>(std::move(options), io)) {}
Relay::~Relay() { stop(); }

void Relay::start() { impl_->server.start(); }
void Relay::stop() { impl_->server.stop(); }
std::uint16_t Relay::port() const { return impl_->server.port(); }
std::string Relay::endpoint() const { return fmt::format("{}:{}", impl_->options.server.host, port()); }

void Relay::connect(const std::string& host, std::uint16_t port) {
  impl_->server.post_to_loop([impl = impl_.get(), host, port] { impl->backend->connect(host, port); });
}

RelayStats Relay::stats() {
  RelayStats s;
  s.server = impl_->server.stats();
  impl_->server.run_on_loop([&] { impl_->backend->fill(s); });
  return s;
}

}  // namespace ctrun::store
