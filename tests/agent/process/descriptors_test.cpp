// Workers get descriptors 0, 1 and 2 only (as torchrun's, through Python's close_fds): not the workers' store's
// listening socket, not the /dev/null or pipes of other ranks' streams, not what ctrun itself inherited. Otherwise
// a worker's daemon keeps the store's port bound after the agent is gone.
#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <sstream>
#include <thread>

#include "tests/agent/run_ctrun.hpp"

namespace ctrun::agent::test {
namespace {

// The lines of `ls -l /proc/self/fd` that name a descriptor other than 0, 1, 2 and ls's own listing.
std::vector<std::string> extra_descriptors(const std::string& listing) {
  std::vector<std::string> extra;
  std::istringstream in(listing);
  for (std::string line; std::getline(in, line);) {
    auto arrow = line.find(" -> ");
    if (arrow == std::string::npos) continue;
    auto space = line.rfind(' ', arrow - 1);
    std::string fd = line.substr(space + 1, arrow - space - 1);
    std::string target = line.substr(arrow + 4);
    bool own_listing = target.rfind("/proc/", 0) == 0 && target.size() > 3 && target.substr(target.size() - 3) == "/fd";
    if (fd != "0" && fd != "1" && fd != "2" && !own_listing) extra.push_back(line);
  }
  return extra;
}

// True once host:port can be bound (no process listens there any more).
bool port_free(const std::string& host, int port, std::chrono::milliseconds deadline) {
  auto end = std::chrono::steady_clock::now() + deadline;
  for (;;) {
    int s = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int one = 1;
    ::setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<std::uint16_t>(port));
    ::inet_pton(AF_INET, host.c_str(), &a.sin_addr);
    bool ok = ::bind(s, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
    ::close(s);
    if (ok) return true;
    if (std::chrono::steady_clock::now() > end) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

TEST(Descriptors, WorkersGetOnlyStdinStdoutStderr) {
  // ctrun inherits this one from the test (no O_CLOEXEC); its workers must not.
  int inherited = ::open("/dev/null", O_RDONLY);
  ASSERT_GE(inherited, 3);
  std::string dir = fresh_dir("descriptors");
  // Rank 0 tee'd (pipes), rank 1 hidden by the filter (/dev/null), the store listening: every kind ctrun opens.
  RunResult r = run_ctrun({"--standalone", "--nproc-per-node=2", "--tee=3", "--local-ranks-filter=0", "--no-python",
                           worker_script("fds.sh")},
                          {{"OUT_DIR", dir}});
  ::close(inherited);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  for (int rank = 0; rank < 2; ++rank) {
    std::string listing = read_file(dir + "/fds_" + std::to_string(rank));
    EXPECT_TRUE(extra_descriptors(listing).empty()) << "local_rank " << rank << " got:\n" << listing;
  }
}

TEST(Descriptors, AWorkersDaemonDoesNotKeepTheStorePortAfterKill9) {
  std::string dir = fresh_dir("descriptors_daemon");
  CtrunProcess p({"--standalone", "--nproc-per-node=1", "--no-python", worker_script("fds.sh")},
                 {{"OUT_DIR", dir}, {"DAEMON", "1"}});
  ASSERT_TRUE(wait_for_files(dir, "fds_0", 1, std::chrono::seconds(30)));
  std::istringstream store(read_file(dir + "/store_0"));
  std::string host;
  int port = 0;
  store >> host >> port;
  pid_t daemon = std::stoi(read_file(dir + "/daemon_0"));
  ASSERT_GT(port, 0);
  ::kill(p.pid(), SIGKILL);
  p.wait(std::chrono::seconds(30));
  // The daemon cleared its environment and left ctrun's care: it outlives ctrun (documented), but holds no socket.
  ASSERT_TRUE(alive(daemon)) << "the daemon must still run for this test to mean anything";
  EXPECT_TRUE(port_free(host, port, std::chrono::seconds(3)))
      << "the workers' store port " << host << ":" << port << " is still bound after kill -9 of ctrun (by the "
      << "worker's daemon " << daemon << ")";
  ::kill(daemon, SIGKILL);
}

}  // namespace
}  // namespace ctrun::agent::test
