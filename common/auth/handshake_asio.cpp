#include "common/auth/handshake_asio.hpp"

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

}  // namespace ctrun::auth
