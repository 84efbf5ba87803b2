#pragma once
// The job's handshake (docs/security.md): before any byte of a job's own protocol, the connecting agent and the
// agent (or ctstore) it reached prove to each other that they hold the job's secret (secret.hpp), by a
// challenge-response over HMAC-SHA256 with a fresh random nonce each way, so that the secret never crosses the wire
// and a recorded handshake replayed later proves nothing (the other side's nonce is new).
//
//   client -> server  hello      "CTRA" 1 1 purpose 0  nonce_c[32]                                   40 bytes
//   server -> client  challenge  "CTRA" 1 2 purpose 0  nonce_s[32]  HMAC(K, "ctrun server" p nonce_c nonce_s)  72
//   client -> server  proof      "CTRA" 1 3 purpose 0  HMAC(K, "ctrun client" p nonce_c nonce_s)      40 bytes
//   server -> client  verdict    "CTRA" 1 4 code 0 0 0                                                8 bytes
//
// The server proves itself first, so a client gives its proof only to a holder of the secret. A server that gets
// anything but a hello (a torch TCPStore client, an agent without the secret) answers a verdict "secret required"
// (code 1) and closes; one whose client's proof is wrong answers code 2 and closes; nothing the peer sent is kept.
// `purpose` binds a handshake to the kind of port (a proof for the store is no proof for the replication endpoint).
//
// This file holds the messages and their checks (no I/O), the blocking variant for clients and thread-per-connection
// servers (bounded by a deadline, cancellable), and the messages' texts; handshake_asio.hpp runs the server side on
// an Asio loop without blocking it.

#include <array>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>

#include "common/auth/secret.hpp"

namespace ctrun::auth {

// What kind of port a proof is for: a store (a rendezvous store, ctstore, a store relay's upstream) or an agent's
// checkpoint replication endpoint.
enum class Purpose : std::uint8_t { kStore = 1, kReplica = 2 };
const char* purpose_name(Purpose purpose);

inline constexpr std::size_t kHelloBytes = 40;
inline constexpr std::size_t kChallengeBytes = 72;
inline constexpr std::size_t kProofBytes = 40;
inline constexpr std::size_t kVerdictBytes = 8;
inline constexpr std::size_t kMagicBytes = 4;  // "CTRA": what every message starts with
inline constexpr std::uint8_t kVersion = 1;
// How long a server gives a client to complete its side (a stalled or silent peer is cut off then).
inline constexpr auto kServerTimeout = std::chrono::seconds(5);

// Why a handshake failed, for the side that reports it.
enum class Failure {
  kNotAHandshake,    // server: the peer's first bytes are no hello (no secret: a plain client, an agent without one)
  kWrongProof,       // server: the client's proof is wrong (another secret); client: the server's is
  kRefusedUs,        // client: the server refused our proof (our secret differs)
  kSecretRequired,   // client without a secret: the server asks for one (is_refusal below)
  kPeerHasNoSecret,  // client: the server closed on our hello (it has no secret)
  kLeftEarly,        // server: the client closed after our challenge (it found our proof wrong: another secret)
  kVersion,          // either: another handshake version or purpose (another ctrun version, another port)
  kTimeout,          // either: no progress until the deadline
  kClosed,           // either: the connection failed otherwise
  kStopped,          // the caller's stop flag was set
};

class AuthError : public std::runtime_error {
 public:
  AuthError(Failure failure, const std::string& what) : std::runtime_error(what), failure_(failure) {}
  Failure failure() const { return failure_; }
  // Whether trying again cannot help (the other side holds another secret, or none): callers that retry a connect
  // give up at once on these.
  bool permanent() const;

 private:
  Failure failure_;
};

// What the server says about a refused peer in its log (the peer's address comes first, from the caller).
std::string server_words(Failure failure);
// What a client says, naming the peer it reached (host:port).
std::string client_words(Failure failure, const std::string& peer);

// True when `bytes` (at least kMagicBytes) start a handshake message: a server without a secret that reads these as
// its first bytes was reached by an agent that has one; a client without a secret that reads them as a reply was
// refused by a server that requires one.
bool is_handshake(const void* bytes, std::size_t size);

using Nonce = std::array<std::uint8_t, 32>;

// The client's side, step by step (no I/O).
class ClientSide {
 public:
  ClientSide(const Secret& secret, Purpose purpose);  // draws its nonce
  std::array<char, kHelloBytes> hello() const;
  // The first kVerdictBytes of the server's answer: true when a challenge follows (read kChallengeBytes -
  // kVerdictBytes more), else throws AuthError (the server refused, or is no handshake).
  bool expect_challenge(const std::array<char, kVerdictBytes>& head) const;
  // The whole challenge: throws AuthError(kWrongProof) when the server's proof is wrong, else the proof to send.
  std::array<char, kProofBytes> answer(const std::array<char, kChallengeBytes>& challenge);
  // The server's verdict on our proof: throws AuthError unless it accepted.
  void accept_verdict(const std::array<char, kVerdictBytes>& verdict) const;

 private:
  const Secret* secret_;
  Purpose purpose_;
  Nonce nonce_{};
  std::optional<Nonce> server_nonce_;
};

// The server's side, step by step (no I/O).
class ServerSide {
 public:
  ServerSide(const Secret& secret, Purpose purpose);  // draws its nonce
  // The first kMagicBytes: false when they are no handshake (answer refusal(), close).
  static bool starts_hello(const void* first, std::size_t size);
  // The whole hello: the challenge to send, or AuthError (kNotAHandshake, kVersion) with refusal() to answer.
  std::array<char, kChallengeBytes> challenge(const std::array<char, kHelloBytes>& hello);
  // The client's proof: true when it is right (answer verdict(true) and go on with the job's protocol); false: answer
  // verdict(false), close.
  bool check(const std::array<char, kProofBytes>& proof) const;
  static std::array<char, kVerdictBytes> verdict(bool accepted);
  // What a peer that sent no hello (or another version's) gets before the close: "secret required" (or "another
  // version") for a peer that failed with `failure`.
  static std::array<char, kVerdictBytes> refusal(Failure failure);

 private:
  const Secret* secret_;
  Purpose purpose_;
  Nonce nonce_{};
  Nonce client_nonce_{};
};

// Blocking, on a connected socket (blocking or not): the whole handshake, or AuthError saying why (client_words /
// server_words). Every wait is bounded by `deadline` and, with `stop`, looks at it every 100 ms. `peer` names the
// other side in messages.
void prove_to_server(int fd, const Secret& secret, Purpose purpose, std::chrono::steady_clock::time_point deadline,
                     const std::string& peer, const std::atomic<bool>* stop = nullptr);
void check_client(int fd, const Secret& secret, Purpose purpose, std::chrono::steady_clock::time_point deadline,
                  const std::atomic<bool>* stop = nullptr);

// Reads and drops what a refused peer sent and nobody read (at most 64 KiB, without waiting): a socket closed with
// unread bytes resets the connection, which may discard the refusal the peer was about to read.
void drain_unread(int fd);

}  // namespace ctrun::auth
