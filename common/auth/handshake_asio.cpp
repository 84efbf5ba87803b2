#include "common/auth/handshake_asio.hpp"

#include <cstring>

#include <boost/asio/read.hpp>
#include <boost/asio/write.hpp>

namespace ctrun::auth {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;

std::shared_ptr<AsyncServerHandshake> AsyncServerHandshake::start(tcp::socket socket,
                                                                  std::shared_ptr<const Secret> secret,
                                                                  Purpose purpose, Done done,
                                                                  std::chrono::milliseconds timeout) {
  auto self = std::make_shared<AsyncServerHandshake>(std::move(socket), std::move(secret), purpose, std::move(done));
  self->timer_.expires_after(timeout);
  self->timer_.async_wait([weak = std::weak_ptr<AsyncServerHandshake>(self)](boost::system::error_code ec) {
    auto me = weak.lock();
    if (ec || !me || me->finished_) return;
    me->timed_out_ = true;
    boost::system::error_code ignored;
    me->socket_.close(ignored);  // the pending read or write ends with an error: reported as the timeout
  });
  self->read_hello();
  return self;
}

AsyncServerHandshake::AsyncServerHandshake(tcp::socket socket, std::shared_ptr<const Secret> secret, Purpose purpose,
                                           Done done)
    : socket_(std::move(socket)),
      timer_(socket_.get_executor()),
      secret_(std::move(secret)),
      side_(*secret_, purpose),
      done_(std::move(done)) {}

void AsyncServerHandshake::cancel() {
  finished_ = true;
  done_ = nullptr;
  timer_.cancel();
  boost::system::error_code ignored;
  socket_.close(ignored);
}

void AsyncServerHandshake::read_hello() {
  auto self = shared_from_this();
  asio::async_read(socket_, asio::buffer(hello_.data(), kMagicBytes), [self](boost::system::error_code ec, std::size_t) {
    if (self->finished_) return;
    if (ec) return self->finish(self->timed_out_ ? Failure::kTimeout : Failure::kNotAHandshake);
    if (!ServerSide::starts_hello(self->hello_.data(), kMagicBytes)) return self->refuse(Failure::kNotAHandshake);
    asio::async_read(self->socket_, asio::buffer(self->hello_.data() + kMagicBytes, kHelloBytes - kMagicBytes),
                     [self](boost::system::error_code ec, std::size_t) {
                       if (self->finished_) return;
                       if (ec) return self->finish(self->timed_out_ ? Failure::kTimeout : Failure::kNotAHandshake);
                       try {
                         self->challenge_ = self->side_.challenge(self->hello_);
                       } catch (const AuthError& e) {
                         return self->refuse(e.failure());
                       }
                       asio::async_write(self->socket_, asio::buffer(self->challenge_),
                                         [self](boost::system::error_code ec, std::size_t) {
                                           if (self->finished_) return;
                                           if (ec) return self->finish(self->timed_out_ ? Failure::kTimeout
                                                                                        : Failure::kClosed);
                                           self->read_proof();
                                         });
                     });
  });
}

void AsyncServerHandshake::read_proof() {
  auto self = shared_from_this();
  asio::async_read(socket_, asio::buffer(proof_), [self](boost::system::error_code ec, std::size_t) {
    if (self->finished_) return;
    if (ec) return self->finish(self->timed_out_ ? Failure::kTimeout : Failure::kLeftEarly);
    const bool accepted = self->side_.check(self->proof_);
    self->verdict_ = ServerSide::verdict(accepted);
    asio::async_write(self->socket_, asio::buffer(self->verdict_),
                      [self, accepted](boost::system::error_code ec, std::size_t) {
                        if (self->finished_) return;
                        if (ec) return self->finish(self->timed_out_ ? Failure::kTimeout : Failure::kClosed);
                        self->finish(accepted ? std::nullopt : std::optional<Failure>(Failure::kWrongProof));
                      });
  });
}

// A peer that sent no hello learns why before the close (a ctrun client without a secret names the cause).
void AsyncServerHandshake::refuse(Failure failure) {
  auto self = shared_from_this();
  verdict_ = ServerSide::refusal(failure);
  asio::async_write(socket_, asio::buffer(verdict_),
                    [self, failure](boost::system::error_code, std::size_t) { self->finish(failure); });
}

void AsyncServerHandshake::finish(std::optional<Failure> failure) {
  if (finished_) return;
  finished_ = true;
  timer_.cancel();
  if (failure) {
    boost::system::error_code ignored;
    if (socket_.is_open()) drain_unread(socket_.native_handle());
    socket_.shutdown(tcp::socket::shutdown_both, ignored);
    socket_.close(ignored);
  }
  if (auto done = std::move(done_)) done(std::move(socket_), failure);
}

namespace {

// The client's state while its handshake runs: the socket stays the caller's; this holds the buffers and the timer.
struct ClientRun : std::enable_shared_from_this<ClientRun> {
  ClientRun(tcp::socket& s, std::shared_ptr<const Secret> k, Purpose p, std::string who,
            std::function<void(std::string)> d)
      : socket(s), timer(s.get_executor()), secret(std::move(k)), side(*secret, p), peer(std::move(who)),
        done(std::move(d)) {}

  void fail(Failure failure) {
    if (finished) return;
    finished = true;
    timer.cancel();
    boost::system::error_code ignored;
    socket.close(ignored);
    done(client_words(timed_out ? Failure::kTimeout : failure, peer));
  }

  void succeed() {
    if (finished) return;
    finished = true;
    timer.cancel();
    done("");
  }

  void run(std::chrono::milliseconds timeout) {
    auto self = shared_from_this();
    timer.expires_after(timeout);
    timer.async_wait([weak = std::weak_ptr<ClientRun>(self)](boost::system::error_code ec) {
      auto me = weak.lock();
      if (ec || !me || me->finished) return;
      me->timed_out = true;
      boost::system::error_code ignored;
      me->socket.cancel(ignored);
    });
    hello = side.hello();
    asio::async_write(socket, asio::buffer(hello), [self](boost::system::error_code ec, std::size_t) {
      if (ec) return self->fail(Failure::kClosed);
      asio::async_read(self->socket, asio::buffer(self->challenge.data(), kVerdictBytes),
                       [self](boost::system::error_code ec, std::size_t) {
                         if (ec) return self->fail(Failure::kPeerHasNoSecret);
                         std::array<char, kVerdictBytes> head{};
                         std::memcpy(head.data(), self->challenge.data(), head.size());
                         try {
                           self->side.expect_challenge(head);
                         } catch (const AuthError& e) {
                           return self->fail(e.failure());
                         }
                         self->read_rest();
                       });
    });
  }

  void read_rest() {
    auto self = shared_from_this();
    asio::async_read(socket, asio::buffer(challenge.data() + kVerdictBytes, kChallengeBytes - kVerdictBytes),
                     [self](boost::system::error_code ec, std::size_t) {
                       if (ec) return self->fail(Failure::kPeerHasNoSecret);
                       try {
                         self->proof = self->side.answer(self->challenge);
                       } catch (const AuthError& e) {
                         return self->fail(e.failure());
                       }
                       asio::async_write(self->socket, asio::buffer(self->proof),
                                         [self](boost::system::error_code ec, std::size_t) {
                                           if (ec) return self->fail(Failure::kClosed);
                                           self->read_verdict();
                                         });
                     });
  }

  void read_verdict() {
    auto self = shared_from_this();
    asio::async_read(socket, asio::buffer(verdict), [self](boost::system::error_code ec, std::size_t) {
      if (ec) return self->fail(Failure::kRefusedUs);
      try {
        self->side.accept_verdict(self->verdict);
      } catch (const AuthError& e) {
        return self->fail(e.failure());
      }
      self->succeed();
    });
  }

  tcp::socket& socket;
  asio::steady_timer timer;
  std::shared_ptr<const Secret> secret;
  ClientSide side;
  std::string peer;
  std::function<void(std::string)> done;
  std::array<char, kHelloBytes> hello{};
  std::array<char, kChallengeBytes> challenge{};
  std::array<char, kProofBytes> proof{};
  std::array<char, kVerdictBytes> verdict{};
  bool timed_out = false;
  bool finished = false;
};

}  // namespace

void async_prove_to_server(tcp::socket& socket, std::shared_ptr<const Secret> secret, Purpose purpose,
                           std::string peer, std::function<void(std::string error)> done,
                           std::chrono::milliseconds timeout) {
  std::make_shared<ClientRun>(socket, std::move(secret), purpose, std::move(peer), std::move(done))->run(timeout);
}

}  // namespace ctrun::auth
