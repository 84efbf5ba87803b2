#include "common/auth/handshake.hpp"

#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "common/auth/crypto.hpp"

namespace ctrun::auth {
namespace {

constexpr char kMagic[kMagicBytes] = {'C', 'T', 'R', 'A'};
enum Type : std::uint8_t { kHello = 1, kChallenge = 2, kProof = 3, kVerdict = 4 };
enum Code : std::uint8_t { kAccepted = 0, kNoHello = 1, kBadProof = 2, kBadVersion = 3 };
constexpr std::size_t kHead = 8;  // magic, version, type, purpose or code, one spare byte

template <std::size_t N>
std::array<char, N> message(Type type, std::uint8_t fourth) {
  std::array<char, N> out{};
  std::memcpy(out.data(), kMagic, kMagicBytes);
  out[4] = static_cast<char>(kVersion);
  out[5] = static_cast<char>(type);
  out[6] = static_cast<char>(fourth);
  return out;
}

std::uint8_t byte_at(const char* bytes, std::size_t i) { return static_cast<std::uint8_t>(bytes[i]); }

// The MAC each side proves itself with: over both nonces, the purpose and the version, labelled by the side, so that
// no message of one side or one port ever serves as a message of another.
Digest mac(const Secret& secret, const char* side, Purpose purpose, const Nonce& client, const Nonce& server) {
  std::string data = side;
  data += static_cast<char>(purpose);
  data += static_cast<char>(kVersion);
  data.append(reinterpret_cast<const char*>(client.data()), client.size());
  data.append(reinterpret_cast<const char*>(server.data()), server.size());
  return hmac_sha256(secret.key(), data);
}

Nonce fresh_nonce() {
  Nonce n{};
  random_bytes(n.data(), n.size());
  return n;
}

// ---- blocking I/O with a deadline ----
using Clock = std::chrono::steady_clock;

void await(int fd, short events, Clock::time_point deadline, const std::atomic<bool>* stop, Failure on_timeout) {
  for (;;) {
    if (stop && stop->load()) throw AuthError(Failure::kStopped, "stopped");
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) throw AuthError(on_timeout, "timeout");
    pollfd p{fd, events, 0};
    const int rc = ::poll(&p, 1, static_cast<int>(std::min<long long>(left, 100)));
    if (rc > 0) return;
    if (rc < 0 && errno != EINTR) throw AuthError(Failure::kClosed, std::string("poll: ") + std::strerror(errno));
  }
}

void send_all(int fd, const char* data, std::size_t size, Clock::time_point deadline, const std::atomic<bool>* stop) {
  while (size > 0) {
    const ssize_t n = ::send(fd, data, size, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      data += n;
      size -= static_cast<std::size_t>(n);
    } else if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
      await(fd, POLLOUT, deadline, stop, Failure::kTimeout);
    } else {
      throw AuthError(Failure::kClosed, std::string("send: ") + std::strerror(errno));
    }
  }
}

// Reads exactly `size` bytes; `on_close` is the failure when the peer closes before.
void receive_all(int fd, char* data, std::size_t size, Clock::time_point deadline, const std::atomic<bool>* stop,
                 Failure on_close) {
  while (size > 0) {
    const ssize_t n = ::recv(fd, data, size, MSG_DONTWAIT);
    if (n > 0) {
      data += n;
      size -= static_cast<std::size_t>(n);
    } else if (n == 0 || (n < 0 && errno == ECONNRESET)) {
      throw AuthError(on_close, "closed");
    } else if (errno == EAGAIN || errno == EINTR) {
      await(fd, POLLIN, deadline, stop, Failure::kTimeout);
    } else {
      throw AuthError(Failure::kClosed, std::string("recv: ") + std::strerror(errno));
    }
  }
}

}  // namespace

void drain_unread(int fd) {
  char sink[4096];
  for (int i = 0; i < 16 && ::recv(fd, sink, sizeof sink, MSG_DONTWAIT) > 0; ++i) {
  }
}

const char* purpose_name(Purpose purpose) {
  switch (purpose) {
    case Purpose::kStore:
      return "store";
    case Purpose::kReplica:
      return "checkpoint replication";
  }
  return "?";
}

bool AuthError::permanent() const {
  return failure_ == Failure::kWrongProof || failure_ == Failure::kRefusedUs || failure_ == Failure::kSecretRequired ||
         failure_ == Failure::kPeerHasNoSecret || failure_ == Failure::kVersion;
}

std::string server_words(Failure failure) {
  switch (failure) {
    case Failure::kNotAHandshake:
      return "it did not prove it holds the job's secret (it sent no handshake: an agent started without the "
             "secret, a plain TCPStore client, or another program)";
    case Failure::kWrongProof:
      return "its proof does not match this job's secret (an agent of another job, or one given another secret)";
    case Failure::kLeftEarly:
      return "it closed the connection after our challenge: it holds another secret (it found our proof wrong)";
    case Failure::kVersion:
      return "it speaks another handshake version or asked for another kind of port (run the same ctrun version "
             "on every node)";
    case Failure::kTimeout:
      return "it did not complete the handshake in time";
    case Failure::kStopped:
      return "the server is stopping";
    default:
      return "the connection failed during the handshake";
  }
}

std::string client_words(Failure failure, const std::string& peer) {
  const std::string same = "; give every agent of the job the same --secret-file or CTRUN_SECRET";
  switch (failure) {
    case Failure::kWrongProof:
      return peer + " does not hold this job's secret (its proof is wrong): it belongs to another job, or was given "
                    "another secret" + same;
    case Failure::kRefusedUs:
      return peer + " refused this agent's proof: this agent's secret differs from the job's" + same;
    case Failure::kSecretRequired:
      return peer + " requires the job's secret and this agent has none" + same;
    case Failure::kPeerHasNoSecret:
      return peer + " closed the connection on this agent's handshake: it has no job secret (an agent started "
                    "without one, or not a ctrun port)" + same;
    case Failure::kVersion:
      return peer + " speaks another handshake version or serves another kind of port (run the same ctrun "
                    "version on every node)";
    case Failure::kTimeout:
      return peer + " did not answer the handshake in time";
    case Failure::kStopped:
      return "stopped during the handshake with " + peer;
    default:
      return "the connection to " + peer + " failed during the handshake";
  }
}

bool is_handshake(const void* bytes, std::size_t size) {
  return size >= kMagicBytes && std::memcmp(bytes, kMagic, kMagicBytes) == 0;
}

// ---- client ----
ClientSide::ClientSide(const Secret& secret, Purpose purpose)
    : secret_(&secret), purpose_(purpose), nonce_(fresh_nonce()) {}

std::array<char, kHelloBytes> ClientSide::hello() const {
  auto out = message<kHelloBytes>(kHello, static_cast<std::uint8_t>(purpose_));
  std::memcpy(out.data() + kHead, nonce_.data(), nonce_.size());
  return out;
}

bool ClientSide::expect_challenge(const std::array<char, kVerdictBytes>& head) const {
  if (!is_handshake(head.data(), head.size())) throw AuthError(Failure::kVersion, "no handshake");
  if (byte_at(head.data(), 4) != kVersion) throw AuthError(Failure::kVersion, "version");
  if (byte_at(head.data(), 5) == kChallenge) {
    if (byte_at(head.data(), 6) != static_cast<std::uint8_t>(purpose_)) throw AuthError(Failure::kVersion, "purpose");
    return true;
  }
  if (byte_at(head.data(), 5) != kVerdict) throw AuthError(Failure::kVersion, "type");
  accept_verdict(head);  // a verdict instead of a challenge is always a refusal
  throw AuthError(Failure::kVersion, "a verdict before any proof");
}

std::array<char, kProofBytes> ClientSide::answer(const std::array<char, kChallengeBytes>& challenge) {
  Nonce server{};
  std::memcpy(server.data(), challenge.data() + kHead, server.size());
  Digest claimed{};
  std::memcpy(claimed.data(), challenge.data() + kHead + server.size(), claimed.size());
  if (!equal_digests(claimed, mac(*secret_, "ctrun server", purpose_, nonce_, server)))
    throw AuthError(Failure::kWrongProof, "the server's proof is wrong");
  server_nonce_ = server;
  auto out = message<kProofBytes>(kProof, static_cast<std::uint8_t>(purpose_));
  const Digest proof = mac(*secret_, "ctrun client", purpose_, nonce_, server);
  std::memcpy(out.data() + kHead, proof.data(), proof.size());
  return out;
}

void ClientSide::accept_verdict(const std::array<char, kVerdictBytes>& verdict) const {
  if (!is_handshake(verdict.data(), verdict.size()) || byte_at(verdict.data(), 5) != kVerdict)
    throw AuthError(Failure::kVersion, "no verdict");
  switch (byte_at(verdict.data(), 6)) {
    case kAccepted:
      if (!server_nonce_) throw AuthError(Failure::kVersion, "accepted before any proof");
      return;
    case kNoHello:
      throw AuthError(Failure::kSecretRequired, "secret required");
    case kBadProof:
      throw AuthError(Failure::kRefusedUs, "proof refused");
    default:
      throw AuthError(Failure::kVersion, "version refused");
  }
}

// ---- server ----
ServerSide::ServerSide(const Secret& secret, Purpose purpose)
    : secret_(&secret), purpose_(purpose), nonce_(fresh_nonce()) {}

bool ServerSide::starts_hello(const void* first, std::size_t size) { return is_handshake(first, size); }

std::array<char, kChallengeBytes> ServerSide::challenge(const std::array<char, kHelloBytes>& hello) {
  if (!is_handshake(hello.data(), hello.size()) || byte_at(hello.data(), 5) != kHello)
    throw AuthError(Failure::kNotAHandshake, "no hello");
  if (byte_at(hello.data(), 4) != kVersion || byte_at(hello.data(), 6) != static_cast<std::uint8_t>(purpose_))
    throw AuthError(Failure::kVersion, "version or purpose");
  std::memcpy(client_nonce_.data(), hello.data() + kHead, client_nonce_.size());
  auto out = message<kChallengeBytes>(kChallenge, static_cast<std::uint8_t>(purpose_));
  std::memcpy(out.data() + kHead, nonce_.data(), nonce_.size());
  const Digest proof = mac(*secret_, "ctrun server", purpose_, client_nonce_, nonce_);
  std::memcpy(out.data() + kHead + nonce_.size(), proof.data(), proof.size());
  return out;
}

bool ServerSide::check(const std::array<char, kProofBytes>& proof) const {
  if (!is_handshake(proof.data(), proof.size()) || byte_at(proof.data(), 5) != kProof) return false;
  Digest claimed{};
  std::memcpy(claimed.data(), proof.data() + kHead, claimed.size());
  return equal_digests(claimed, mac(*secret_, "ctrun client", purpose_, client_nonce_, nonce_));
}

std::array<char, kVerdictBytes> ServerSide::verdict(bool accepted) {
  return message<kVerdictBytes>(kVerdict, accepted ? kAccepted : kBadProof);
}

std::array<char, kVerdictBytes> ServerSide::refusal(Failure failure) {
  return message<kVerdictBytes>(kVerdict, failure == Failure::kVersion ? kBadVersion : kNoHello);
}

// ---- blocking ----
void prove_to_server(int fd, const Secret& secret, Purpose purpose, Clock::time_point deadline,
                     const std::string& peer, const std::atomic<bool>* stop) {
  try {
    ClientSide client(secret, purpose);
    const auto hello = client.hello();
    send_all(fd, hello.data(), hello.size(), deadline, stop);
    std::array<char, kChallengeBytes> challenge{};
    receive_all(fd, challenge.data(), kVerdictBytes, deadline, stop, Failure::kPeerHasNoSecret);
    std::array<char, kVerdictBytes> head{};
    std::memcpy(head.data(), challenge.data(), head.size());
    client.expect_challenge(head);
    receive_all(fd, challenge.data() + kVerdictBytes, kChallengeBytes - kVerdictBytes, deadline, stop,
                Failure::kPeerHasNoSecret);
    const auto proof = client.answer(challenge);
    send_all(fd, proof.data(), proof.size(), deadline, stop);
    std::array<char, kVerdictBytes> verdict{};
    receive_all(fd, verdict.data(), verdict.size(), deadline, stop, Failure::kRefusedUs);
    client.accept_verdict(verdict);
  } catch (const AuthError& e) {
    throw AuthError(e.failure(), client_words(e.failure(), peer));
  }
}

void check_client(int fd, const Secret& secret, Purpose purpose, Clock::time_point deadline,
                  const std::atomic<bool>* stop) {
  ServerSide server(secret, purpose);
  std::array<char, kHelloBytes> hello{};
  try {
    receive_all(fd, hello.data(), kMagicBytes, deadline, stop, Failure::kNotAHandshake);
    if (!ServerSide::starts_hello(hello.data(), kMagicBytes)) throw AuthError(Failure::kNotAHandshake, "no hello");
    receive_all(fd, hello.data() + kMagicBytes, kHelloBytes - kMagicBytes, deadline, stop, Failure::kNotAHandshake);
    const auto challenge = server.challenge(hello);
    send_all(fd, challenge.data(), challenge.size(), deadline, stop);
    std::array<char, kProofBytes> proof{};
    receive_all(fd, proof.data(), proof.size(), deadline, stop, Failure::kLeftEarly);
    const bool accepted = server.check(proof);
    const auto verdict = ServerSide::verdict(accepted);
    send_all(fd, verdict.data(), verdict.size(), deadline, stop);
    if (!accepted) throw AuthError(Failure::kWrongProof, server_words(Failure::kWrongProof));
  } catch (const AuthError& e) {
    if (e.failure() == Failure::kNotAHandshake || e.failure() == Failure::kVersion) {
      const auto refusal = ServerSide::refusal(e.failure());
      try {
        send_all(fd, refusal.data(), refusal.size(), std::min(deadline, Clock::now() + std::chrono::seconds(1)),
                 nullptr);
      } catch (const AuthError&) {
      }
    }
    drain_unread(fd);
    throw AuthError(e.failure(), server_words(e.failure()));
  }
}

}  // namespace ctrun::auth
