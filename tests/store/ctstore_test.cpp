// The ctstore daemon as a real child process: the port line on stdout with --port 0, serving both
// dialects, a JSON stats line on SIGUSR1 and with --stats-interval, clean exit 0 on SIGTERM and SIGINT,
// exit 2 with usage on a bad flag, a clear error on a busy port.
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>

#include <fcntl.h>

#include <filesystem>
#include <regex>
#include <thread>

#include <nlohmann/json.hpp>

#include "tests/store/raw_socket.hpp"
#include "tests/support/ctstore.hpp"

extern char** environ;

namespace ctrun::store {
namespace {

using namespace std::chrono_literals;
using ctrun::test::CtstoreChild;
using ctrun::test::kCtstore;
using ctrun::test::listening_port;
using test::bytes_field;
using test::le32;
using test::le64;
using test::RawSocket;
using test::read_le64;

TEST(Ctstore, ServesBothDialectsReportsStatsAndStopsOnSigterm) {
  ASSERT_TRUE(std::filesystem::exists(kCtstore)) << kCtstore;
  CtstoreChild c({"--port", "0", "--host", "127.0.0.1"});
  ASSERT_GT(c.pid(), 0);
  auto port = listening_port(c);
  ASSERT_NE(port, 0) << c.all_stderr();

  RawSocket legacy("127.0.0.1", port);  // torch 1.13: ADD init/ 1
  std::string add(1, 3);
  bytes_field(add, "init/");
  le64(add, 1);
  ASSERT_TRUE(legacy.send_all(add));
  EXPECT_EQ(read_le64(legacy.recv_exact(8)), 1u);
  RawSocket v2("127.0.0.1", port);  // torch 2.x: VALIDATE, PING, ADD init/ 1
  std::string hello(1, 0);
  le32(hello, 0x3C85F7CE);
  hello.push_back(13);
  le32(hello, 4242);
  hello.push_back(4);
  bytes_field(hello, "init/");
  le64(hello, 1);
  ASSERT_TRUE(v2.send_all(hello));
  auto r = v2.recv_exact(12);
  ASSERT_EQ(r.size(), 12u);
  EXPECT_EQ(read_le64(r.substr(4)), 2u);

  ASSERT_EQ(::kill(c.pid(), SIGUSR1), 0);
  auto stats_line = c.line();
  ASSERT_TRUE(stats_line.has_value());
  auto j = nlohmann::json::parse(*stats_line);
  EXPECT_EQ(j["connections_open"], 2);
  EXPECT_EQ(j["keys"], 1);
  EXPECT_EQ(j["ops"]["ADD"], 2);
  EXPECT_EQ(j["ops"]["VALIDATE"], 1);
  EXPECT_EQ(j["connections_rejected"], 0);

  ASSERT_EQ(::kill(c.pid(), SIGTERM), 0);
  EXPECT_EQ(c.wait(), std::optional<int>(0));
  EXPECT_TRUE(legacy.recv_until_close(5s).has_value());
  EXPECT_NE(c.all_stderr().find("serving TCPStore on 127.0.0.1:" + std::to_string(port) + " (both dialects"),
            std::string::npos);
}

TEST(Ctstore, StatsIntervalAndSigint) {
  CtstoreChild c({"--port", "0", "--host", "127.0.0.1", "--stats-interval", "0.1"});
  ASSERT_NE(listening_port(c), 0);
  auto l = c.line(5s);
  ASSERT_TRUE(l.has_value());
  EXPECT_TRUE(nlohmann::json::parse(*l).contains("connections_accepted")) << *l;
  ASSERT_EQ(::kill(c.pid(), SIGINT), 0);
  EXPECT_EQ(c.wait(), std::optional<int>(0));
}

TEST(Ctstore, BadFlagExitsTwoWithUsage) {
  for (std::vector<std::string> args : {std::vector<std::string>{"--no-such-flag"},
                                        {"--port", "70000"},
                                        {"--port", "abc"},
                                        {"--stats-interval", "-1"}}) {
    CtstoreChild c(args);
    EXPECT_EQ(c.wait(), std::optional<int>(2)) << args[0];
    EXPECT_NE(c.all_stderr().find("Usage"), std::string::npos);
  }
}

TEST(Ctstore, BusyPortIsAnErrorNotAHang) {
  CtstoreChild first({"--port", "0", "--host", "127.0.0.1"});
  auto port = listening_port(first);
  ASSERT_NE(port, 0);
  CtstoreChild second({"--port", std::to_string(port), "--host", "127.0.0.1"});
  EXPECT_EQ(second.wait(), std::optional<int>(1));
  EXPECT_NE(second.all_stderr().find(std::to_string(port)), std::string::npos);
  ::kill(first.pid(), SIGTERM);
  EXPECT_EQ(first.wait(), std::optional<int>(0));
}

// `ctstore VERB --endpoint HOST:PORT`: a person looking inside a live store.
TEST(Ctstore, ClientVerbsReadAndChangeALiveStore) {
  CtstoreChild server({"--port", "0", "--host", "127.0.0.1"});
  auto port = listening_port(server);
  ASSERT_NE(port, 0);
  const std::string ep = "127.0.0.1:" + std::to_string(port);
  // Runs one verb; (exit code, stdout).
  auto verb = [&](std::vector<std::string> args) {
    args.insert(args.begin() + 1, {"--endpoint", ep});
    CtstoreChild c(args);
    std::string out;
    while (auto l = c.line(10s)) out += *l + "\n";
    auto rc = c.wait(15s);
    return std::make_pair(rc.value_or(-100), out);
  };
  // What a torch worker's client wrote: "/" + key.
  RawSocket worker("127.0.0.1", port);
  std::string set(1, 0);
  bytes_field(set, "/rdzv/state");
  bytes_field(set, "round-1");
  set.push_back(6);  // GETNUMKEYS: its reply proves the SET was applied
  ASSERT_TRUE(worker.send_all(set));
  ASSERT_EQ(worker.recv_exact(8).size(), 8u);

  EXPECT_EQ(verb({"set", "/rdzv/extra", "x"}), std::make_pair(0, std::string()));
  EXPECT_EQ(verb({"add", "/n", "5"}), std::make_pair(0, std::string("5\n")));
  EXPECT_EQ(verb({"get", "/rdzv/state"}), std::make_pair(0, std::string("round-1\n")));
  EXPECT_EQ(verb({"list"}), std::make_pair(0, std::string("/n\n/rdzv/extra\n/rdzv/state\n")));
  EXPECT_EQ(verb({"list", "/rdzv/"}), std::make_pair(0, std::string("/rdzv/extra\n/rdzv/state\n")));
  EXPECT_EQ(verb({"get", "/missing"}).first, 1);
  EXPECT_EQ(verb({"wait", "--timeout", "0.3", "/missing"}).first, 1);
  EXPECT_EQ(verb({"wait", "/n", "/rdzv/state"}).first, 0);
  EXPECT_EQ(verb({"delete", "/n"}).first, 0);
  EXPECT_EQ(verb({"delete", "/n"}).first, 1);
  EXPECT_EQ(verb({"watch", "--count", "1", "/rdzv/state"}), std::make_pair(0, std::string("round-1\n")));
  EXPECT_EQ(verb({"get", "--no-such-flag", "k"}).first, 2);
  {
    CtstoreChild bad({"get", "--endpoint", "nonsense", "k"});
    EXPECT_EQ(bad.wait(), std::optional<int>(2));
    EXPECT_NE(bad.all_stderr().find("HOST:PORT"), std::string::npos);
  }
  ::kill(server.pid(), SIGTERM);
  EXPECT_EQ(server.wait(), std::optional<int>(0));
}

}  // namespace
}  // namespace ctrun::store
