// The live view's listener: the latest snapshot as text and JSON, and an idle client held to its deadline.
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

TEST(StatusServer, ServesTheLatestSnapshotAsTextAndJson) {
  boost::asio::io_context io;  // the agent's loop, run here by a thread of the test
  StatusServer server(io);
  ASSERT_GT(server.port(), 0);
  std::thread loop([&] { io.run(); });                      // the server's pending accept keeps it running
  auto publish = [&](std::string text, std::string json) {  // on the loop, as the agent does
    std::promise<void> done;
    boost::asio::post(io, [&] {
      server.publish(text, json);
      done.set_value();
    });
    done.get_future().wait();
  };
  publish("rank 0 in op\n", R"({"ranks":[{"rank":0}]})");
  EXPECT_EQ(http::get("127.0.0.1", server.port(), "/"), "rank 0 in op\n");
  EXPECT_EQ(http::get("127.0.0.1", server.port(), "/status.json"), "{\"ranks\":[{\"rank\":0}]}\n");
  publish("rank 0 between ops\n", "{}");
  EXPECT_EQ(http::get("127.0.0.1", server.port(), "/"), "rank 0 between ops\n");
  EXPECT_THROW(http::get("127.0.0.1", server.port(), "/nope"), std::runtime_error);
  // A client that connects and sends nothing holds one of the server's places for at most its 2 s deadline.
  const int idle = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<std::uint16_t>(server.port()));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::connect(idle, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  EXPECT_EQ(http::get("127.0.0.1", server.port(), "/", 4000), "rank 0 between ops\n");
  ::close(idle);
  io.stop();
  loop.join();
}

}  // namespace
}  // namespace ctrun::agent::status
