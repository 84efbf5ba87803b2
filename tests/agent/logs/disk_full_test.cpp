// A log directory on a full disk (a 64 KiB tmpfs mounted in a private mount namespace the test creates): ctrun
// warns once per file with its path, keeps showing the output on the console, and the job itself is unaffected. The
// disk fills while the job runs: the built-in check of the log directory's free space before the round (which
// would keep a 64 KiB disk out) is off here, and tested in tests/agent/health/node_checks_test.cpp.
#include <gtest/gtest.h>

#include <sys/wait.h>

#include <cstdlib>
#include <filesystem>

#include "tests/agent/run_ctrun.hpp"

namespace ctrun::agent::test {
namespace {

TEST(DiskFull, WarnsOnceWithThePathAndTheJobGoesOn) {
  std::string dir = fresh_dir("disk_full");
  std::string mnt = dir + "/small";
  std::filesystem::create_directories(mnt);
  if (std::system(("timeout 20 unshare -m sh -c 'mount -t tmpfs -o size=64k tmpfs " + mnt + "' 2>/dev/null").c_str()) !=
      0) {
    GTEST_SKIP() << "cannot mount a tmpfs in a private mount namespace here (needs CAP_SYS_ADMIN)";
  }
  std::string cmd = "timeout 60 unshare -m sh -c 'mount -t tmpfs -o size=64k tmpfs " + mnt + " && LINES=5000 exec " +
                    ctrun_binary() + " --nproc-per-node=1 --tee=3 --rdzv-id=full --health-min-free=0 --log-dir=" + mnt +
                    "/logs --event-log=" + mnt + "/events.jsonl --no-python " + workers_dir() + "/chatter.sh' > " +
                    dir + "/out 2> " + dir + "/err";
  int status = std::system(cmd.c_str());
  ASSERT_TRUE(WIFEXITED(status));
  std::string err = read_file(dir + "/err");
  EXPECT_EQ(WEXITSTATUS(status), 0) << err;
  // Once per file (at most the rank's stdout and stderr files), with the path; the console still got every line.
  EXPECT_GE(count_of(err, "cannot write worker output to " + mnt + "/logs/full_"), 1u) << err;
  EXPECT_LE(count_of(err, "cannot write worker output to " + mnt + "/logs/full_"), 2u) << err;
  EXPECT_EQ(count_of(err, "/attempt_0/0/stdout.log: No space left on device"), 1u) << err;
  EXPECT_EQ(count_of(read_file(dir + "/out"), "rank 0 line "), 5000u);
  EXPECT_LE(count_of(err, "cannot write the event log"), 1u) << err;
}

}  // namespace
}  // namespace ctrun::agent::test
