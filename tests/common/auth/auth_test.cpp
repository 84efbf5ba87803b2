// common/auth/: the crypto module (known answers: RFC 4231's HMAC-SHA256 test cases, FIPS 180's SHA-256 of "abc", the
// CRC-32 check value), the job secret's sources, and the handshake: the messages and their checks, both blocking
// sides over a socketpair, the Asio server side, a replayed handshake, a stranger and a silent peer.
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <boost/asio.hpp>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <future>
#include <optional>
#include <thread>

#include "common/auth/crypto.hpp"
#include "common/auth/handshake.hpp"
#include "common/auth/handshake_asio.hpp"
#include "common/auth/secret.hpp"

namespace ctrun::auth {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

std::string unhex(const std::string& hex) {
  std::string out;
  for (std::size_t i = 0; i + 1 < hex.size(); i += 2) out += static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16));
  return out;
}

// RFC 4231, section 4: test cases 1-4, 6 and 7 (5 is a truncated output).
TEST(Crypto, HmacSha256MatchesRfc4231) {
  struct Case {
    std::string key, data, mac;
  };
  const std::vector<Case> cases = {
      {std::string(20, '\x0b'), "Hi There", "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7"},
      {"Jefe", "what do ya want for nothing?", "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"},
      {std::string(20, '\xaa'), std::string(50, '\xdd'),
       "773ea91e36800e46854db8ebd09181a72959098b3ef8c122d9635514ced565fe"},
      {unhex("0102030405060708090a0b0c0d0e0f10111213141516171819"), std::string(50, '\xcd'),
       "82558a389a443c0ea4cc819899f2083a85f0faa3e578f8077a2e3ff46729665b"},
      {std::string(131, '\xaa'), "Test Using Larger Than Block-Size Key - Hash Key First",
       "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54"},
      {std::string(131, '\xaa'),
       "This is a test using a larger than block-size key and a larger than block-size data. The key needs to be "
       "hashed before being used by the HMAC algorithm.",
       "9b09ffa71b942fcb27635fbcd5b0e944bfdc63644f0713938a7f51535c3a35e2"},
  };
  for (const auto& c : cases) EXPECT_EQ(to_hex(hmac_sha256(c.key, c.data)), c.mac) << c.data;
}

TEST(Crypto, Sha256AndCrc32KnownAnswers) {
  EXPECT_EQ(to_hex(sha256("abc", 3)), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(crc32("123456789", 9), 0xCBF43926u);  // the CRC-32 check value (zlib's, Python's zlib.crc32)
  Digest a = sha256("a", 1), b = a;
  EXPECT_TRUE(equal_digests(a, b));
  b[31] ^= 1;
  EXPECT_FALSE(equal_digests(a, b));
}

TEST(Secret, SourcesAndTheirRules) {
  EXPECT_THROW(Secret("short", "test"), std::invalid_argument);
  EXPECT_EQ(Secret("0123456789abcdef\n", "test").key(), "0123456789abcdef");  // echo's newline dropped
  const auto generated = Secret::generate("test");
  EXPECT_EQ(generated.key().size(), 64u);
  EXPECT_NE(generated.key(), Secret::generate("test").key());
  const auto dir = std::filesystem::temp_directory_path() / ("ctrun-secret-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const auto file = (dir / "job.key").string();
  std::ofstream(file) << "a-secret-of-the-job-0123456789\n";
  ::chmod(file.c_str(), 0644);
  EXPECT_NE(secret_file_warning(file).find("chmod 600"), std::string::npos);
  ::chmod(file.c_str(), 0600);
  EXPECT_EQ(secret_file_warning(file), "");
  const auto read = Secret::from_file(file);
  EXPECT_EQ(read.key(), "a-secret-of-the-job-0123456789");
  EXPECT_EQ(read.source().find("a-secret"), std::string::npos);  // a source names the file, never the secret
  try {
    Secret::from_file((dir / "missing").string());
    FAIL() << "a missing file was read";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("missing"), std::string::npos) << e.what();
  }
  std::filesystem::remove_all(dir);
}

const Secret kJob("the-job-secret-0123456789", "test");
const Secret kOther("another-secret-0123456789", "test");

TEST(Handshake, MessagesProveBothSidesAndRefuseAReplay) {
  ClientSide client(kJob, Purpose::kReplica);
  ServerSide server(kJob, Purpose::kReplica);
  const auto hello = client.hello();
  const auto challenge = server.challenge(hello);
  std::array<char, kVerdictBytes> head{};
  std::memcpy(head.data(), challenge.data(), head.size());
  EXPECT_TRUE(client.expect_challenge(head));
  const auto proof = client.answer(challenge);
  EXPECT_TRUE(server.check(proof));
  client.accept_verdict(ServerSide::verdict(true));

  // A recorded hello and proof played to another connection of the same server: its nonce is new, the proof is not.
  ServerSide later(kJob, Purpose::kReplica);
  const auto fresh = later.challenge(hello);
  EXPECT_NE(std::memcmp(fresh.data() + 8, challenge.data() + 8, 32), 0);
  EXPECT_FALSE(later.check(proof));

  // The same messages for another kind of port: refused before any proof.
  ServerSide store(kJob, Purpose::kStore);
  try {
    store.challenge(hello);
    FAIL() << "a replication hello was taken by a store";
  } catch (const AuthError& e) {
    EXPECT_EQ(e.failure(), Failure::kVersion);
  }
  // A server with another secret: the client finds its proof wrong and gives none of its own.
  ClientSide mine(kJob, Purpose::kStore);
  ServerSide theirs(kOther, Purpose::kStore);
  try {
    mine.answer(theirs.challenge(mine.hello()));
    FAIL() << "a server with another secret was believed";
  } catch (const AuthError& e) {
    EXPECT_EQ(e.failure(), Failure::kWrongProof);
    EXPECT_TRUE(e.permanent());
  }
  EXPECT_THROW(ClientSide(kJob, Purpose::kStore).accept_verdict(ServerSide::verdict(true)), AuthError);
}

// Both blocking sides over a socketpair: the server's outcome (nullopt: accepted) and the client's error ("" if none).
struct Outcome {
  std::optional<Failure> server;
  std::string server_text;
  std::optional<Failure> client;
  std::string client_text;
};

Outcome run_pair(const Secret& client_secret, const Secret& server_secret,
                 std::chrono::milliseconds deadline = 5000ms) {
  int fds[2];
  EXPECT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, fds), 0);
  Outcome out;
  std::thread server([&] {
    try {
      check_client(fds[1], server_secret, Purpose::kStore, Clock::now() + deadline);
    } catch (const AuthError& e) {
      out.server = e.failure();
      out.server_text = e.what();
    }
    ::close(fds[1]);
  });
  try {
    prove_to_server(fds[0], client_secret, Purpose::kStore, Clock::now() + deadline, "the store at h:1");
  } catch (const AuthError& e) {
    out.client = e.failure();
    out.client_text = e.what();
  }
  ::close(fds[0]);
  server.join();
  return out;
}

TEST(Handshake, BlockingSidesAgreeOrNameTheCauseOnBoth) {
  const auto ok = run_pair(kJob, kJob);
  EXPECT_FALSE(ok.server.has_value()) << ok.server_text;
  EXPECT_FALSE(ok.client.has_value()) << ok.client_text;

  const auto wrong = run_pair(kOther, kJob);
  EXPECT_EQ(wrong.client, Failure::kWrongProof) << wrong.client_text;
  EXPECT_NE(wrong.client_text.find("does not hold this job's secret"), std::string::npos) << wrong.client_text;
  EXPECT_EQ(wrong.server, Failure::kLeftEarly) << wrong.server_text;
  EXPECT_NE(wrong.server_text.find("another secret"), std::string::npos) << wrong.server_text;
}

TEST(Handshake, AStrangerGetsARefusalAndASilentPeerTheDeadline) {
  int fds[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, fds), 0);
  // torch's first bytes (VALIDATE with its magic, then a PING).
  const char torch[] = {0x0d, '\xce', '\xf7', '\x85', '\x3c', 0x10, 0x00, 0x00, 0x00, 0x00};
  ASSERT_EQ(::write(fds[0], torch, sizeof torch), static_cast<ssize_t>(sizeof torch));
  try {
    check_client(fds[1], kJob, Purpose::kStore, Clock::now() + 2s);
    FAIL() << "a stranger was let in";
  } catch (const AuthError& e) {
    EXPECT_EQ(e.failure(), Failure::kNotAHandshake);
  }
  char answer[kVerdictBytes];
  ASSERT_EQ(::read(fds[0], answer, sizeof answer), static_cast<ssize_t>(sizeof answer));
  EXPECT_TRUE(is_handshake(answer, sizeof answer));  // what a ctrun client without a secret recognises
  ::close(fds[0]);
  ::close(fds[1]);

  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, fds), 0);
  const auto began = Clock::now();
  try {
    check_client(fds[1], kJob, Purpose::kStore, Clock::now() + 300ms);
    FAIL() << "a silent peer was let in";
  } catch (const AuthError& e) {
    EXPECT_EQ(e.failure(), Failure::kTimeout);
  }
  EXPECT_LT(Clock::now() - began, 3s);
  std::atomic<bool> stop{true};
  EXPECT_THROW(prove_to_server(fds[0], kJob, Purpose::kStore, Clock::now() + 10s, "p", &stop), AuthError);
  ::close(fds[0]);
  ::close(fds[1]);
}

TEST(Handshake, AsioServerSideAdmitsTheJobAndRefusesOthers) {
  namespace asio = boost::asio;
  using tcp = asio::ip::tcp;
  asio::io_context io;
  tcp::acceptor acceptor(io, tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0));
  const auto port = acceptor.local_endpoint().port();
  auto secret = std::make_shared<const Secret>(kJob);
  std::vector<std::optional<Failure>> outcomes;
  std::vector<std::shared_ptr<AsyncServerHandshake>> running;
  std::function<void()> accept_next = [&] {
    acceptor.async_accept([&](boost::system::error_code ec, tcp::socket s) {
      if (ec) return;
      running.push_back(AsyncServerHandshake::start(
          std::move(s), secret, Purpose::kStore,
          [&](tcp::socket admitted, std::optional<Failure> failure) {
            outcomes.push_back(failure);
            if (!failure) {
              EXPECT_TRUE(admitted.is_open());
            }
          },
          500ms));
      accept_next();
    });
  };
  accept_next();
  std::thread loop([&] { io.run_for(10s); });

  auto dial = [&] {
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
    return fd;
  };
  int fd = dial();
  EXPECT_NO_THROW(prove_to_server(fd, kJob, Purpose::kStore, Clock::now() + 5s, "s"));
  ::close(fd);
  // The client side on a loop of its own (a relay's upstream), against the same server.
  {
    asio::io_context client_io;
    tcp::socket upstream(client_io);
    upstream.connect(tcp::endpoint(asio::ip::make_address("127.0.0.1"), port));
    std::optional<std::string> error;
    async_prove_to_server(upstream, std::make_shared<const Secret>(kJob), Purpose::kStore, "the store",
                          [&](std::string e) { error = std::move(e); });
    client_io.run_for(5s);
    ASSERT_TRUE(error.has_value());
    EXPECT_EQ(*error, "");
    EXPECT_TRUE(upstream.is_open());
  }
  fd = dial();
  EXPECT_THROW(prove_to_server(fd, kOther, Purpose::kStore, Clock::now() + 5s, "s"), AuthError);
  ::close(fd);
  fd = dial();  // silent: cut at the server's deadline (500 ms here)
  char byte;
  EXPECT_EQ(::read(fd, &byte, 1), 0);
  ::close(fd);
  io.stop();
  loop.join();
  ASSERT_EQ(outcomes.size(), 4u);
  EXPECT_FALSE(outcomes[0].has_value());
  EXPECT_FALSE(outcomes[1].has_value());
  EXPECT_EQ(outcomes[2], Failure::kLeftEarly);
  EXPECT_EQ(outcomes[3], Failure::kTimeout);
}

}  // namespace
}  // namespace ctrun::auth
