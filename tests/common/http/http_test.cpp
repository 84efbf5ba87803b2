// common/http: routes answered, others 404, a failing route 500, the client's errors say what failed, and a
// stalled client holds one of the server's threads for at most its request timeout.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <stdexcept>
#include <string>

#include "common/http/client.hpp"
#include "common/http/server.hpp"

namespace ctrun::http {
namespace {

using Clock = std::chrono::steady_clock;

std::string message_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::runtime_error& e) {
    return e.what();
  }
  return "(no error)";
}

int connect_idle(std::uint16_t port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  return fd;
}

TEST(HttpServer, AnswersItsRoutesAndNothingElse) {
  if (!available()) GTEST_SKIP() << "built with -DCTRUN_WITH_METRICS=OFF: no civetweb/libcurl";
  int calls = 0;
  Server server("127.0.0.1", 0,
                {{"/",
                  [&] {
                    return Reply{"text/plain", "root " + std::to_string(++calls) + "\n"};
                  }},
                 {"/x.json",
                  [] {
                    return Reply{"application/json", "{}"};
                  }},
                 {"/broken", []() -> Reply { throw std::runtime_error("snapshot unavailable"); }}});
  ASSERT_GT(server.port(), 0);
  EXPECT_EQ(get("127.0.0.1", server.port(), "/"), "root 1\n");
  EXPECT_EQ(get("127.0.0.1", server.port(), "/"), "root 2\n");
  EXPECT_EQ(get("127.0.0.1", server.port(), "/x.json"), "{}");
  EXPECT_NE(message_of([&] { get("127.0.0.1", server.port(), "/nope"); }).find("answered 404"), std::string::npos);
  EXPECT_NE(message_of([&] { get("127.0.0.1", server.port(), "/x.json/more"); }).find("answered 404"),
            std::string::npos);
  const std::string broken = message_of([&] { get("127.0.0.1", server.port(), "/broken"); });
  EXPECT_NE(broken.find("answered 500"), std::string::npos) << broken;
  EXPECT_EQ(calls, 2);
}

// civetweb 1.15 alone holds a stop for its accept poll (up to 2 s once it has served a request): a ctrun that ends
// would wait for it. Five cycles of start, one GET, stop took 10.0 s before stop_promptly().
TEST(HttpServer, StopsPromptly) {
  if (!available()) GTEST_SKIP() << "built with -DCTRUN_WITH_METRICS=OFF: no civetweb/libcurl";
  const auto t0 = Clock::now();
  for (int i = 0; i < 5; ++i) {
    Server server("127.0.0.1", 0, {{"/", [] { return Reply{"text/plain", "ok"}; }}});
    EXPECT_EQ(get("127.0.0.1", server.port(), "/"), "ok");  // the accept loop is in its poll from now on
  }
  EXPECT_LT(std::chrono::duration<double>(Clock::now() - t0).count(), 5.0);
}

TEST(HttpServer, StalledClientsAreCutOffAfterTheRequestTimeout) {
  if (!available()) GTEST_SKIP() << "built with -DCTRUN_WITH_METRICS=OFF: no civetweb/libcurl";
  ServerBounds bounds;
  bounds.threads = 1;
  bounds.request_timeout = std::chrono::milliseconds(500);
  Server server("127.0.0.1", 0, {{"/", [] { return Reply{"text/plain", "ok"}; }}}, bounds);
  // Two clients that connect and send nothing: with one thread, a GET behind them waits for the timeouts only.
  const int a = connect_idle(server.port()), b = connect_idle(server.port());
  const auto t0 = Clock::now();
  EXPECT_EQ(get("127.0.0.1", server.port(), "/", 10000), "ok");
  const double took = std::chrono::duration<double>(Clock::now() - t0).count();
  EXPECT_LT(took, 8.0) << "served once the stalled clients' 0.5 s timeouts passed, not after the client's 10 s";
  ::close(a);
  ::close(b);
}

// A hostile client: a request head past max_request_bytes costs that client its connection; others are served.
TEST(HttpServer, AnOversizeRequestLosesItsConnectionOnly) {
  if (!available()) GTEST_SKIP() << "built with -DCTRUN_WITH_METRICS=OFF: no civetweb/libcurl";
  Server server("127.0.0.1", 0, {{"/", [] { return Reply{"text/plain", "ok"}; }}});
  const int fd = connect_idle(server.port());
  const std::string head = "GET / HTTP/1.1\r\nX-Big: " + std::string(64 * 1024, 'a') + "\r\n\r\n";
  (void)::send(fd, head.data(), head.size(), MSG_NOSIGNAL);
  std::string reply;
  char buf[4096];
  timeval tv{5, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  for (ssize_t n; (n = ::recv(fd, buf, sizeof buf, 0)) > 0;) reply.append(buf, static_cast<std::size_t>(n));
  EXPECT_EQ(reply.find("200 OK"), std::string::npos) << reply;
  ::close(fd);
  EXPECT_EQ(get("127.0.0.1", server.port(), "/"), "ok");
}

TEST(HttpClient, SaysWhatFailed) {
  if (!available()) GTEST_SKIP() << "built with -DCTRUN_WITH_METRICS=OFF: no civetweb/libcurl";
  // A port bound and listened on by nobody: refused at once.
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  socklen_t len = sizeof addr;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  const int port = ntohs(addr.sin_port);
  const std::string refused = message_of([&] { get("127.0.0.1", port, "/"); });
  EXPECT_NE(refused.find("GET http://127.0.0.1:" + std::to_string(port) + "/ failed"), std::string::npos) << refused;
  // Listening but never answering: the client gives up at its timeout.
  ASSERT_EQ(::listen(fd, 4), 0);
  const auto t0 = Clock::now();
  const std::string silent = message_of([&] { get("127.0.0.1", port, "/", 300); });
  EXPECT_NE(silent.find("failed"), std::string::npos) << silent;
  EXPECT_LT(std::chrono::duration<double>(Clock::now() - t0).count(), 5.0);
  ::close(fd);
}

}  // namespace
}  // namespace ctrun::http
