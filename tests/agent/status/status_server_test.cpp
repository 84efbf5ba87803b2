// The live view's listener: the text to curl and `ctrun --status`, the page to a browser, the model as JSON, log
// tails of this node's ranks only, 404 for anything else, and an idle client held to its deadline.
#include "agent/status/status_server.hpp"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <future>
#include <thread>

#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>

#include "common/http/client.hpp"

namespace ctrun::agent::status {
namespace {

// GET with a browser's Accept header (http::get sends none): the raw reply.
std::string get_as_browser(int port, const std::string& path) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<std::uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  const std::string head = "GET " + path + " HTTP/1.1\r\nHost: x\r\nAccept: text/html,application/xhtml+xml,*/*\r\n\r\n";
  (void)::send(fd, head.data(), head.size(), MSG_NOSIGNAL);
  timeval tv{5, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  std::string reply;
  char buf[4096];
  for (ssize_t n; (n = ::recv(fd, buf, sizeof buf, 0)) > 0;) reply.append(buf, static_cast<std::size_t>(n));
  ::close(fd);
  return reply;
}

TEST(StatusServer, RendersWhatIsAskedForWhenAsked) {
  boost::asio::io_context io;  // the agent's loop, run here by a thread of the test
  int renders = 0;
  StatusServer::Pages pages;
  pages.text = [&] { return "rank 0 in op (" + std::to_string(++renders) + ")\n"; };
  pages.json = [] { return std::string(R"({"ranks":[{"rank":0}]})"); };
  pages.html = [] { return std::string("<!doctype html><table id=\"ranks\"></table>"); };
  pages.progress = [] { return std::string(R"({"t":[]})"); };
  pages.logs = [](const std::string& rank, int lines) -> std::optional<std::string> {
    if (rank != "0" && rank != "all") return std::nullopt;
    return "rank " + rank + ", " + std::to_string(lines) + " lines\n";
  };
  StatusServer server(io, std::move(pages));
  ASSERT_GT(server.port(), 0);
  std::thread loop([&] { io.run(); });  // the server's pending accept keeps it running
  EXPECT_EQ(renders, 0) << "nothing is rendered before someone asks";
  EXPECT_EQ(http::get("127.0.0.1", server.port(), "/"), "rank 0 in op (1)\n");
  EXPECT_EQ(http::get("127.0.0.1", server.port(), "/status.json"), "{\"ranks\":[{\"rank\":0}]}\n");
  EXPECT_EQ(http::get("127.0.0.1", server.port(), "/progress.json"), "{\"t\":[]}\n");
  const std::string page = get_as_browser(server.port(), "/");
  EXPECT_NE(page.find("Content-Type: text/html"), std::string::npos) << page;
  EXPECT_NE(page.find("<table id=\"ranks\">"), std::string::npos) << page;
  EXPECT_NE(http::get("127.0.0.1", server.port(), "/index.html").find("<!doctype html>"), std::string::npos);
  EXPECT_EQ(http::get("127.0.0.1", server.port(), "/logs?rank=0&lines=5"), "rank 0, 5 lines\n");
  EXPECT_EQ(http::get("127.0.0.1", server.port(), "/logs"), "rank all, 100 lines\n");
  for (const char* bad : {"/logs?rank=7", "/logs?rank=0&lines=x", "/nope", "/status.json/x", "/favicon.ico"})
    EXPECT_THROW(http::get("127.0.0.1", server.port(), bad), std::runtime_error) << bad;
  // A client that connects and sends nothing holds one of the server's places for at most its 2 s deadline.
  const int idle = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<std::uint16_t>(server.port()));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::connect(idle, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  EXPECT_EQ(http::get("127.0.0.1", server.port(), "/", 4000), "rank 0 in op (2)\n");
  ::close(idle);
  io.stop();
  loop.join();
}

}  // namespace
}  // namespace ctrun::agent::status
