// peek(): a read of a key that may be missing in one store operation, over MemoryStore and over a real TCPStore
// server (one COMPARE_SET on the wire, nothing created, later WAITs unaffected).
#include "rendezvous/peek.hpp"

#include <gtest/gtest.h>

#include "store/memory_store.hpp"
#include "store/server.hpp"
#include "store/tcp_store.hpp"

using namespace ctrun;
using namespace std::chrono_literals;

namespace {

std::uint64_t requests(store::Server& server, const std::string& command = {}) {
  std::uint64_t n = 0;
  for (const auto& [name, count] : server.stats().ops)
    if (command.empty() || name == command) n += count;
  return n;
}

void check_semantics(store::Store& s) {
  EXPECT_EQ(rdzv::peek(s, "missing"), std::nullopt);
  EXPECT_FALSE(s.check({"missing"})) << "a peek must not create the key";
  s.set("k", "value");
  EXPECT_EQ(rdzv::peek(s, "k"), "value");
  EXPECT_EQ(s.get("k"), "value") << "a peek must not change the key";
  s.add("counter", 41);
  s.add("counter", 1);
  EXPECT_EQ(rdzv::peek(s, "counter"), "42");
  s.set("empty", "");
  EXPECT_EQ(rdzv::peek(s, "empty"), "");
}

}  // namespace

TEST(Peek, MemoryStore) {
  store::MemoryStore s(2s);
  check_semantics(s);
}

TEST(Peek, OneRequestOverARealTcpStore) {
  store::ServerOptions o;
  o.host = "127.0.0.1";
  store::Server server(o);
  server.start();
  store::TcpStoreOptions c;
  c.host = "127.0.0.1";
  c.port = server.port();
  c.timeout = 5s;
  store::TcpStore s(c);
  check_semantics(s);

  const auto before = requests(server);
  const auto cas_before = requests(server, "COMPARE_SET");
  EXPECT_EQ(rdzv::peek(s, "absent"), std::nullopt);
  EXPECT_EQ(rdzv::peek(s, "k"), "value");
  EXPECT_EQ(requests(server) - before, 2u) << "one request per peek (a GET would be WAIT + GET)";
  EXPECT_EQ(requests(server, "COMPARE_SET") - cas_before, 2u);

  // The connection is in sync and nothing was registered: a WAIT on the peeked key still works both ways.
  EXPECT_THROW(s.wait({"absent"}, 50ms), store::TimeoutError);
  s.set("absent", "now");
  s.wait({"absent"}, 2s);
  EXPECT_EQ(rdzv::peek(s, "absent"), "now");
}
