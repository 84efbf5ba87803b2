// The rendezvous store vanishes under a running two-node job (a standalone ctstore, SIGKILLed) and comes back
// empty on the same port. That is no node's death: both agents stop their workers and meet again in a new round of
// both nodes on the restarted store (neither declares the other dead, no restart is consumed), and the job
// completes.
#include <gtest/gtest.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <filesystem>

#include "tests/agent/run_ctrun.hpp"
#include "tests/support/ctstore.hpp"
#include "tests/support/port_reservation.hpp"

namespace ctrun::agent::test {
namespace {

using Clock = std::chrono::steady_clock;

using ctrun::test::PortReservation;
using ctrun::test::start_ctstore;

TEST(StoreLoss, CtstoreRestartedEmptyIsNoDeathBothNodesMeetInANewRound) {
  std::string dir = fresh_dir("store_loss");
  // Held for the whole test, across the ctstore's death: the restarted ctstore gets the same port back, and
  // nothing else can take it in between.
  PortReservation reserved;
  const auto port = reserved.port();
  auto store = start_ctstore(port);
  auto args = [&](const std::string& addr, const std::string& events) {
    return std::vector<std::string>{"--nnodes=2",
                                    "--nproc-per-node=1",
                                    "--rdzv-backend=c10d",
                                    "--rdzv-endpoint=127.0.0.1:" + std::to_string(port),
                                    "--rdzv-id=loss",
                                    "--local-addr=" + addr,
                                    "--rdzv-conf=join_timeout=8,is_host=false",
                                    "--monitor-interval=0.1",
                                    "--shutdown-timeout=5",
                                    "--event-log=" + events,
                                    "--max-restarts=0",
                                    "--no-python",
                                    worker_script("once_then_exit.sh")};
  };
  std::filesystem::create_directories(dir + "/a");
  std::filesystem::create_directories(dir + "/b");
  CtrunProcess a(args("127.0.0.2", dir + "/a.jsonl"), {{"OUT_DIR", dir + "/a"}});
  CtrunProcess b(args("127.0.0.3", dir + "/b.jsonl"), {{"OUT_DIR", dir + "/b"}});
  // once_then_exit.sh: the first round's workers wait; the next round's exit 0 at once.
  // The workers' own mark, not the agents' worker_start: a worker stopped before it made its mark would wait again
  // in the next round (the script's first start), and the job would not end.
  ASSERT_TRUE(wait_for_files(dir + "/a", "seen_", 1, std::chrono::seconds(60)));
  ASSERT_TRUE(wait_for_files(dir + "/b", "seen_", 1, std::chrono::seconds(60)));
  store.process->kill();  // SIGKILL, reaped
  auto t0 = Clock::now();
  store = start_ctstore(port);
  RunResult ra = a.wait(std::chrono::seconds(40));
  RunResult rb = b.wait(std::chrono::seconds(20));
  double s = std::chrono::duration<double>(Clock::now() - t0).count();
  store.process->kill();
  std::printf("[ store loss ] both agents done %.2f s after the store came back; exit codes %d %d\n", s, ra.exit_code,
              rb.exit_code);
  ASSERT_NE(ra.exit_code, -1) << "agent a hung:\n" << ra.err;
  ASSERT_NE(rb.exit_code, -1) << "agent b hung:\n" << rb.err;
  EXPECT_LT(s, 20.0);  // a new round at once; bounded well below join_timeout + its grace on a loaded machine
  for (const auto* r : {&ra, &rb}) {
    const std::string events = read_file(r == &ra ? dir + "/a.jsonl" : dir + "/b.jsonl");
    const std::string starts = read_file(r == &ra ? dir + "/a/starts_0" : dir + "/b/starts_0");
    EXPECT_EQ(r->exit_code, 0) << r->err;
    EXPECT_NE(events.find("membership_change"), std::string::npos) << events;  // the loss was noticed
    EXPECT_EQ(count_of(events, "\"event\":\"rendezvous\""), 2u) << events;
    EXPECT_EQ(count_of(events, "\"group_world_size\":2"), 2u) << events;  // both rounds of both nodes
    // Two starts, both at restart count 0 (a store restart consumes no restart), each of world size 2.
    const std::string rank = r == &ra ? "0" : "1";
    EXPECT_EQ(starts, "0 " + rank + " 2\n0 " + rank + " 2\n");
    for (const char* death : {"closed its connection", "lost heartbeat", "dead:"})
      EXPECT_EQ(r->err.find(death), std::string::npos) << "a live node taken for dead:\n" << r->err;
  }
}

}  // namespace
}  // namespace ctrun::agent::test
