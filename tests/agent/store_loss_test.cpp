// The rendezvous store vanishes under a running two-node job (a standalone ctstore, SIGKILLed) and comes back
// empty on the same port: both agents stop their workers and either form a new round on the restarted store or
// fail with a clear message, well within join_timeout — never hang.
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

TEST(StoreLoss, CtstoreRestartedEmptyGivesANewRoundOrAClearError) {
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
                                    "--no-python",
                                    worker_script("wait_term.sh")};
  };
  CtrunProcess a(args("127.0.0.2", dir + "/a.jsonl"), {{"OUT_DIR", dir + "/a"}});
  CtrunProcess b(args("127.0.0.3", dir + "/b.jsonl"), {{"OUT_DIR", dir + "/b"}});
  std::filesystem::create_directories(dir + "/a");
  std::filesystem::create_directories(dir + "/b");
  ASSERT_TRUE(wait_for_text(dir + "/a.jsonl", "worker_start", std::chrono::seconds(60)));
  ASSERT_TRUE(wait_for_text(dir + "/b.jsonl", "worker_start", std::chrono::seconds(60)));
  store.process->kill();  // SIGKILL, reaped
  auto t0 = Clock::now();
  store = start_ctstore(port);
  RunResult ra = a.wait(std::chrono::seconds(70));
  RunResult rb = b.wait(std::chrono::seconds(20));
  double s = std::chrono::duration<double>(Clock::now() - t0).count();
  store.process->kill();
  std::printf("[ store loss ] both agents done %.2f s after the store came back; exit codes %d %d\n", s, ra.exit_code,
              rb.exit_code);
  ASSERT_NE(ra.exit_code, -1) << "agent a hung";
  ASSERT_NE(rb.exit_code, -1) << "agent b hung";
  EXPECT_LT(s, 50.0);  // join_timeout=8 plus the 10 s grace, plus margin
  for (const auto* r : {&ra, &rb}) {
    const std::string& events = r == &ra ? read_file(dir + "/a.jsonl") : read_file(dir + "/b.jsonl");
    EXPECT_NE(events.find("membership_change"), std::string::npos) << events;  // the loss was noticed
    if (r->exit_code != 0) {
      // The clear error: it names the rendezvous store.
      EXPECT_NE(r->err.find("rendezvous"), std::string::npos) << r->err;
      EXPECT_NE(r->err.find("store"), std::string::npos) << r->err;
    } else {
      EXPECT_GE(count_of(events, "\"event\":\"rendezvous\""), 2u) << events;
    }
  }
  for (const char* sub : {"/a", "/b"}) expect_no_worker_left(worker_pids(dir + sub));
}

}  // namespace
}  // namespace ctrun::agent::test
