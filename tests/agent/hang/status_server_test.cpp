// The live view's listener: the latest snapshot as text and JSON, and an idle client held to its deadline.
#include "agent/hang/status_server.hpp"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/http/client.hpp"

namespace ctrun::agent::hang {
namespace {

TEST(HangStatusServer, ServesTheLatestSnapshotAsTextAndJson) {
  StatusServer server;
  ASSERT_GT(server.port(), 0);
  server.publish("rank 0 in op\n", R"({"ranks":[{"rank":0}]})");
  EXPECT_EQ(http::get("127.0.0.1", server.port(), "/"), "rank 0 in op\n");
  EXPECT_EQ(http::get("127.0.0.1", server.port(), "/status.json"), "{\"ranks\":[{\"rank\":0}]}\n");
  server.publish("rank 0 between ops\n", "{}");
  EXPECT_EQ(http::get("127.0.0.1", server.port(), "/"), "rank 0 between ops\n");
  EXPECT_THROW(http::get("127.0.0.1", server.port(), "/nope"), std::runtime_error);
  // A client that connects and sends nothing holds the server for at most its 2 s deadline.
  const int idle = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<std::uint16_t>(server.port()));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::connect(idle, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  EXPECT_EQ(http::get("127.0.0.1", server.port(), "/", 4000), "rank 0 between ops\n");
  ::close(idle);
}

}  // namespace
}  // namespace ctrun::agent::hang
