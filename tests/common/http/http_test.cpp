// common/http: routes answered, others 404, a failing route 500, the client's errors say what failed, a stalled
// client holds one of the server's places for at most its request timeout, and on its owner's loop the server starts
// no thread, answers later without blocking the loop, and bounds a route that never answers.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <functional>
#include <future>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>

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
  int calls = 0;
  Server server("127.0.0.1", 0,
                {{"/", answer_now([&] {
                    return Reply{"text/plain", "root " + std::to_string(++calls) + "\n"};
                  })},
                 {"/x.json", answer_now([] {
                    return Reply{"application/json", "{}"};
                  })},
                 {"/broken", answer_now([]() -> Reply { throw std::runtime_error("snapshot unavailable"); })}});
  ASSERT_GT(server.port(), 0);
  EXPECT_EQ(get("127.0.0.1", server.port(), "/"), "root 1\n");
  EXPECT_EQ(get("127.0.0.1", server.port(), "/"), "root 2\n");
  EXPECT_EQ(get("127.0.0.1", server.port(), "/x.json"), "{}");
  EXPECT_EQ(get("127.0.0.1", server.port(), "/?query=ignored"), "root 3\n");
  EXPECT_NE(message_of([&] { get("127.0.0.1", server.port(), "/nope"); }).find("answered 404"), std::string::npos);
  EXPECT_NE(message_of([&] { get("127.0.0.1", server.port(), "/x.json/more"); }).find("answered 404"),
            std::string::npos);
  const std::string broken = message_of([&] { get("127.0.0.1", server.port(), "/broken"); });
  EXPECT_NE(broken.find("answered 500"), std::string::npos) << broken;
  EXPECT_EQ(calls, 3);
}

Route ok() {
  return answer_now([] { return Reply{"text/plain", "ok"}; });
}

// A ctrun that ends must not wait for its listeners: civetweb 1.15 held each stop up to 2 s (these 40 cycles: 80 s).
// A stop is a close now (40 ms for all 40 on a quiet 2-core VM, up to 1.1 s with three copies of the suite running),
// so the bound only catches a stop that waits again; the no-thread design itself is checked by
// ServesOnTheOwnersLoopWithoutBlockingIt, and the speed by launch_bench (docs/benchmarks.md).
TEST(HttpServer, StopsPromptly) {
  const auto t0 = Clock::now();
  for (int i = 0; i < 40; ++i) {
    Server server("127.0.0.1", 0, {{"/", ok()}});
    EXPECT_EQ(get("127.0.0.1", server.port(), "/"), "ok");
  }
  EXPECT_LT(std::chrono::duration<double>(Clock::now() - t0).count(), 10.0);
}

TEST(HttpServer, StalledClientsAreCutOffAfterTheRequestTimeout) {
  ServerBounds bounds;
  bounds.connections = 1;
  bounds.request_timeout = std::chrono::milliseconds(500);
  Server server("127.0.0.1", 0, {{"/", ok()}}, bounds);
  // Two clients that connect and send nothing: with one place, a GET behind them waits for the timeouts only.
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
  Server server("127.0.0.1", 0, {{"/", ok()}});
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

std::size_t threads_of_this_process() {
  return static_cast<std::size_t>(std::distance(std::filesystem::directory_iterator("/proc/self/task"), {}));
}

// The owner's loop, run by a thread of the test (the agent runs its own on its main thread).
struct Loop {
  boost::asio::io_context io{1};
  std::optional<boost::asio::executor_work_guard<boost::asio::io_context::executor_type>> work{io.get_executor()};
  std::thread thread{[this] { io.run(); }};
  ~Loop() {
    work.reset();
    io.stop();
    thread.join();
  }
  template <typename F>
  auto on_loop(F f) {  // runs f on the loop and returns what it returns
    std::packaged_task<decltype(f())()> task(std::move(f));
    auto done = task.get_future();
    boost::asio::post(io, [&task] { task(); });
    return done.get();
  }
};

// The live view on the agent's loop: no thread of its own, a route that answers later leaves the loop free for the
// others, a route that never answers costs its client a 503 after the reply timeout, and a stop closes at once.
TEST(HttpServer, ServesOnTheOwnersLoopWithoutBlockingIt) {
  Loop loop;
  boost::asio::steady_timer later(loop.io);
  ServerBounds bounds;
  bounds.reply_timeout = std::chrono::milliseconds(300);
  const std::size_t threads_before = threads_of_this_process();
  auto server = loop.on_loop([&] {
    Routes routes = {
        {"/", ok()},
        {"/later",
         [&](Respond respond) {  // answered by a timer on the loop, 200 ms on
           later.expires_after(std::chrono::milliseconds(200));
           later.async_wait([respond](const boost::system::error_code&) { respond({"text/plain", "later"}); });
         }},
        {"/never", [](Respond) {}}};
    return std::make_unique<Server>(loop.io, "127.0.0.1", 0, std::move(routes), bounds);
  });
  EXPECT_EQ(threads_of_this_process(), threads_before) << "serving on the owner's loop starts no thread";
  const int port = server->port();
  auto pending = std::async(std::launch::async, [&] { return get("127.0.0.1", port, "/later", 5000); });
  const auto t0 = Clock::now();
  EXPECT_EQ(get("127.0.0.1", port, "/", 5000), "ok");
  EXPECT_LT(std::chrono::duration<double>(Clock::now() - t0).count(), 0.2) << "the pending /later held the loop";
  EXPECT_EQ(pending.get(), "later");
  const std::string never = message_of([&] { get("127.0.0.1", port, "/never", 5000); });
  EXPECT_NE(never.find("answered 503"), std::string::npos) << never;
  // A request waiting for its answer when the server goes: its connection closes at once.
  auto orphan =
      std::async(std::launch::async, [&] { return message_of([&] { get("127.0.0.1", port, "/never", 5000); }); });
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  const auto t1 = Clock::now();
  loop.on_loop([&] {
    server.reset();
    return 0;
  });
  EXPECT_NE(orphan.get().find("failed"), std::string::npos);
  EXPECT_LT(std::chrono::duration<double>(Clock::now() - t1).count(), 0.25);
}

// What a route is asked: the query's parameters and whether the client wants HTML (a browser's Accept header).
TEST(HttpServer, RoutesSeeTheQueryAndTheAcceptHeader) {
  Request r{"/logs", "rank=3&lines=50&flag", "text/html,application/xhtml+xml,*/*;q=0.8"};
  EXPECT_EQ(r.param("rank"), "3");
  EXPECT_EQ(r.param("lines"), "50");
  EXPECT_EQ(r.param("flag"), "");
  EXPECT_EQ(r.param("ran"), std::nullopt);
  EXPECT_TRUE(r.wants_html());
  EXPECT_FALSE((Request{"/", "", "*/*"}.wants_html()));
  Server server("127.0.0.1", 0,
                {{"/echo", answer_now([](const Request& q) {
                    return Reply{"text/plain", q.path + "|" + q.param("x").value_or("-") + "|" + q.accept};
                  })}});
  EXPECT_EQ(get("127.0.0.1", server.port(), "/echo?x=7"), "/echo|7|");
}

// Polls `done` every 20 ms for up to `ms`.
bool wait_until(const std::function<bool()>& done, int ms) {
  const auto until = Clock::now() + std::chrono::milliseconds(ms);
  while (Clock::now() < until) {
    if (done()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return done();
}

// A raw client of an event stream: the head and the messages as they come.
struct Viewer {
  int fd = -1;
  std::string got;
  explicit Viewer(std::uint16_t port, int rcvbuf = 0) {
    fd = ::socket(AF_INET, SOCK_STREAM, 0);
    if (rcvbuf > 0) ::setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof rcvbuf);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
    const std::string head = "GET /events HTTP/1.1\r\nHost: x\r\n\r\n";
    EXPECT_EQ(::send(fd, head.data(), head.size(), MSG_NOSIGNAL), static_cast<ssize_t>(head.size()));
  }
  ~Viewer() { ::close(fd); }
  // Reads until `text` has come (true) or 5 s passed.
  bool wait_for(const std::string& text) {
    const auto until = Clock::now() + std::chrono::seconds(5);
    timeval tv{0, 100000};
    ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    char buf[65536];
    while (got.find(text) == std::string::npos && Clock::now() < until) {
      const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
      if (n == 0) break;
      if (n > 0) got.append(buf, static_cast<std::size_t>(n));
    }
    return got.find(text) != std::string::npos;
  }
};

// Server-sent events: a viewer gets the first message and then each one published; past the stream's bound the
// next viewer gets a 503; viewers hold no request place (plain GETs are still served); a viewer that stops reading
// never holds the publisher and is dropped after the request timeout, and the others go on.
TEST(HttpServer, EventStreamsAreBoundedAndASlowViewerHoldsNobody) {
  Loop loop;
  ServerBounds bounds;
  bounds.connections = 2;
  bounds.request_timeout = std::chrono::milliseconds(1000);
  auto stream = std::make_shared<EventStream>(3);
  auto server = loop.on_loop([&] {
    Routes routes = {{"/", ok()}, {"/events", answer_now([stream] {
                                      return Reply{"text/event-stream", "data: first\n\n", 200, {}, stream};
                                    })}};
    return std::make_unique<Server>(loop.io, "127.0.0.1", 0, std::move(routes), bounds);
  });
  const auto port = server->port();
  Viewer a(port), b(port);
  ASSERT_TRUE(a.wait_for("data: first\n\n")) << a.got;
  ASSERT_TRUE(b.wait_for("data: first\n\n")) << b.got;
  EXPECT_NE(a.got.find("Content-Type: text/event-stream"), std::string::npos) << a.got;
  EXPECT_EQ(get("127.0.0.1", port, "/"), "ok") << "two viewers and still a place for a request";
  // The third viewer stops reading at once, with a small receive buffer: the big messages below fill it.
  auto slow = std::make_unique<Viewer>(port, 4096);
  ASSERT_TRUE(slow->wait_for("data: first\n\n"));
  EXPECT_EQ(loop.on_loop([&] { return stream->clients(); }), 3);
  Viewer refused(port);
  EXPECT_TRUE(refused.wait_for("503")) << refused.got;
  EXPECT_NE(refused.got.find("viewers"), std::string::npos) << refused.got;
  const std::string big(4 << 20, 'x');
  const auto t0 = Clock::now();
  for (int i = 0; i < 5; ++i) loop.on_loop([&] {
      stream->publish("data: " + std::to_string(i) + big.substr(0, 3 << 20) + "\n\n");
      return 0;
    });
  EXPECT_LT(std::chrono::duration<double>(Clock::now() - t0).count(), 2.0) << "publishing never waits for a viewer";
  ASSERT_TRUE(a.wait_for("data: 4")) << "the last message reaches a viewer that reads";
  // The slow viewer cannot take the messages (3 MiB each; the first and the newest are written, 6 MiB, more than
  // the 4 MiB a loopback send buffer grows to here): dropped after the 1 s request timeout.
  EXPECT_TRUE(wait_until([&] { return loop.on_loop([&] { return stream->clients(); }) == 2; }, 5000));
  loop.on_loop([&] {
    stream->publish("data: after\n\n");
    return 0;
  });
  EXPECT_TRUE(b.wait_for("data: after")) << "the others go on";
  slow.reset();
  loop.on_loop([&] {
    server.reset();
    return 0;
  });
}

TEST(HttpClient, SaysWhatFailed) {
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
