#pragma once
// Both sides of the job's handshake (handshake.hpp) on an Asio loop: every read, write and the deadline are
// asynchronous, so a peer that stalls or trickles never holds up the loop, and it holds only its socket and a few
// fixed buffers (nothing it sends is kept) for at most its timeout. The server side is the store server's
// (store/server.cpp) when it has a secret; the client side is for connections made on a loop (a store relay's
// upstream: one call after its connect, then the store's protocol on the same socket).

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>

#include <array>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "common/auth/handshake.hpp"

namespace ctrun::auth {

class AsyncServerHandshake : public std::enable_shared_from_this<AsyncServerHandshake> {
 public:
  // Called once on the socket's loop: the socket with the handshake done (failure empty), or the failure (the socket
  // was answered what handshake.hpp says and closed).
  using Done = std::function<void(boost::asio::ip::tcp::socket socket, std::optional<Failure> failure)>;

  // Starts the handshake on `socket` (an accepted connection); returns at once.
  static std::shared_ptr<AsyncServerHandshake> start(boost::asio::ip::tcp::socket socket,
                                                     std::shared_ptr<const Secret> secret, Purpose purpose, Done done,
                                                     std::chrono::milliseconds timeout = kServerTimeout);
  // Closes the socket now; `done` is never called (the server is stopping).
  void cancel();

  AsyncServerHandshake(boost::asio::ip::tcp::socket socket, std::shared_ptr<const Secret> secret, Purpose purpose,
                       Done done);

 private:
  void read_hello();
  void read_proof();
  void refuse(Failure failure);
  void finish(std::optional<Failure> failure);

  boost::asio::ip::tcp::socket socket_;
  boost::asio::steady_timer timer_;
  std::shared_ptr<const Secret> secret_;
  ServerSide side_;
  Done done_;
  std::array<char, kHelloBytes> hello_{};
  std::array<char, kChallengeBytes> challenge_{};
  std::array<char, kProofBytes> proof_{};
  std::array<char, kVerdictBytes> verdict_{};
  bool timed_out_ = false;
  bool finished_ = false;
};

// The client's side: one call on a connected socket. `done` gets "" when both sides proved the secret (the socket is
// then ready for the job's protocol), else client_words' text naming `peer` (the socket is closed then).
void async_prove_to_server(boost::asio::ip::tcp::socket& socket, std::shared_ptr<const Secret> secret,
                           Purpose purpose, std::string peer, std::function<void(std::string error)> done,
                           std::chrono::milliseconds timeout = kServerTimeout);

}  // namespace ctrun::auth
