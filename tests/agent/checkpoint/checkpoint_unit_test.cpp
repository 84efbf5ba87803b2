// The agent's side of in-memory checkpoints (agent/checkpoint/): names, sizes, the default limit, the agreement
// rule, the job directory's life (create, reconcile, remove, sweep after a kill -9) and the workers' notices.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>

#include <boost/asio/io_context.hpp>

#include "agent/checkpoint/agreement.hpp"
#include "agent/checkpoint/job_directory.hpp"
#include "agent/checkpoint/layout.hpp"
#include "agent/checkpoint/memory_limit.hpp"
#include "agent/base/memory_size.hpp"
#include "agent/checkpoint/notices.hpp"
#include "agent/checkpoint/spill.hpp"
#include "agent/checkpoint/summary_view.hpp"

namespace ctrun::agent::checkpoint {
namespace {
namespace fs = std::filesystem;

// The live view's lines: nothing while off and empty; replication and --checkpoint-dir only when they apply.
TEST(CheckpointSummaryView, WordsWhatTheNodeHolds) {
  CheckpointKeeper::Summary s;
  EXPECT_EQ(summary_text(s), "");
  EXPECT_TRUE(summary_json(s).is_null());
  s.on = true;
  s.newest_step = 41;
  s.oldest_step = 40;
  s.bytes = 3u << 20;
  s.limit = 1u << 30;
  EXPECT_EQ(summary_text(s),
            "checkpoints on this node: newest step every local rank holds 41, oldest held 40; 3.0 MiB of 1.0 GiB "
            "(--checkpoint-memory)\n");
  s.replicas = 1;
  s.replicated_step = 39;
  s.replicated_age_s = 0.3;
  s.spilling = true;
  s.spilled_step = 35;
  const std::string text = summary_text(s);
  EXPECT_NE(text.find("replicated to 1 other node(s): step 39, 2 step(s) behind, 0.3 s ago"), std::string::npos)
      << text;
  EXPECT_NE(text.find("--checkpoint-dir: newest step on disk 35"), std::string::npos) << text;
  const auto j = summary_json(s);
  EXPECT_EQ(j["newest_step"], 41);
  EXPECT_EQ(j["oldest_step"], 40);
  EXPECT_EQ(j["replicated_step"], 39);
  EXPECT_EQ(j["spilled_step"], 35);
  EXPECT_EQ(j["limit_bytes"], 1u << 30);
  s.replicated_step = -1;  // nothing copied yet: every held step is behind
  s.replicated_age_s = -1;
  EXPECT_NE(summary_text(s).find("step none, 42 step(s) behind;"), std::string::npos) << summary_text(s);
  EXPECT_TRUE(summary_json(s)["replicated_age_s"].is_null());
}

// A node publishes its record for group rank 0's view only once it holds something: checkpoints merely on (every
// job's default) publish nothing, so a job that saves none pays no store op for the view.
TEST(CheckpointSummaryView, OnlyANodeThatHoldsSomethingPublishes) {
  CheckpointKeeper::Summary s;
  s.on = true;
  EXPECT_FALSE(holds_something(s));
  s.newest_step = 0;
  EXPECT_TRUE(holds_something(s));
  s = {};
  s.bytes = 1;
  EXPECT_TRUE(holds_something(s));
}

// Group rank 0's view of the other nodes: a line per node from the record it published (node_record), a node that
// has not published yet said as such, one with checkpoints off and an unreadable record too; never itself.
TEST(CheckpointSummaryView, WordsEveryOtherNodeFromItsRecord) {
  CheckpointKeeper::Summary b;
  b.on = true;
  b.newest_step = 7;
  b.oldest_step = 6;
  b.bytes = 3u << 20;
  b.limit = 1u << 30;
  b.replicas = 1;
  b.replicated_step = 6;
  b.spilling = true;
  b.spilled_step = 5;
  const std::map<int, std::string> records = {
      {0, "ignored: the asking node"}, {1, node_record(b)}, {3, node_record({})}, {4, "{not json"}};
  const std::string text = nodes_text(records, 0, 5);
  EXPECT_EQ(text,
            "checkpoints on the other nodes (as each published them, every 2 s or so):\n"
            "  node 1: newest step every local rank holds 7, oldest held 6; 3.0 MiB of 1.0 GiB; replicated step 6, "
            "1 step(s) behind\n"
            "  node 2: has not published its checkpoints yet\n"
            "  node 3: in-memory checkpoints off\n"
            "  node 4: its record is unreadable (run the same ctrun version on every node)\n");
  const auto j = nodes_json(records, 0, 5);
  ASSERT_EQ(j.size(), 4u);
  EXPECT_EQ(j[0]["group_rank"], 1);
  EXPECT_EQ(j[0], [&] {
    auto want = summary_json(b);
    want["group_rank"] = 1;
    want["published"] = true;
    return want;
  }());
  EXPECT_EQ(j[1], (nlohmann::json{{"group_rank", 2}, {"published", false}}));
  EXPECT_EQ(j[2]["on"], false);
  EXPECT_EQ(j[3]["unreadable"], true);
  EXPECT_EQ(nodes_text(records, 0, 1), "");
  EXPECT_TRUE(nodes_json(records, 0, 1).empty());
}

std::string temp_root() {
  std::string pattern = (fs::temp_directory_path() / "ctrun-ckpt-test-XXXXXX").string();
  return ::mkdtemp(pattern.data());
}

// A file of `bytes` allocated bytes, as a worker's posix_fallocate makes it.
void write_file(const fs::path& path, std::size_t bytes) {
  const int fd = ::open(path.c_str(), O_CREAT | O_WRONLY | O_TRUNC, 0600);
  ASSERT_GE(fd, 0) << path;
  if (bytes > 0) {
    ASSERT_EQ(::posix_fallocate(fd, 0, static_cast<off_t>(bytes)), 0);
  }
  ::close(fd);
}

// A pid that was a process of ours and is gone now.
int dead_pid() {
  const pid_t pid = ::fork();
  if (pid == 0) ::_exit(0);
  ::waitpid(pid, nullptr, 0);
  return pid;
}

TEST(CheckpointLayout, NamesRoundTripAndOthersAreRejected) {
  EXPECT_EQ(job_dir_name(42), "ctrun-checkpoint-42");
  EXPECT_EQ(agent_pid_of("ctrun-checkpoint-42"), 42);
  EXPECT_EQ(rank_of(rank_dir_name(7)), 7);
  EXPECT_EQ(step_of(step_file_name(123456789012)), 123456789012);
  for (const char* bad : {"ctrun-checkpoint-", "ctrun-checkpoint-0", "ctrun-checkpoint-1x", "ctrun-progress-1-1"})
    EXPECT_FALSE(agent_pid_of(bad)) << bad;
  for (const char* bad : {"step-.ckpt", "step--1.ckpt", "step-3.ckp", ".partial-3-99", "step-3x.ckpt"})
    EXPECT_FALSE(step_of(bad)) << bad;
  EXPECT_TRUE(is_partial(".partial-3-99"));
  EXPECT_FALSE(is_partial("step-3.ckpt"));
}

TEST(CheckpointMemorySize, ParsesUnitsAndRejectsTheRest) {
  EXPECT_EQ(parse_memory_size("0"), 0u);
  EXPECT_EQ(parse_memory_size("4096"), 4096u);
  EXPECT_EQ(parse_memory_size("512M"), 512u << 20);
  EXPECT_EQ(parse_memory_size("8g"), std::uint64_t{8} << 30);
  EXPECT_EQ(parse_memory_size("1.5KiB"), 1536u);
  EXPECT_EQ(parse_memory_size(" 2 GB "), std::uint64_t{2} << 30);
  EXPECT_EQ(parse_memory_size("1T"), std::uint64_t{1} << 40);
  for (const char* bad : {"", "-1", "+1", "M", "8X", "8 MiBs", "nan", "inf", "1e30"})
    EXPECT_FALSE(parse_memory_size(bad)) << bad;
  EXPECT_EQ(format_bytes(812), "812 B");
  EXPECT_EQ(format_bytes(1536), "1.5 KiB");
  EXPECT_EQ(format_bytes(128u << 20), "128.0 MiB");
  EXPECT_EQ(format_bytes(std::uint64_t{3} << 40), "3.0 TiB");
}

TEST(CheckpointMemoryLimit, HalfTheMemoryAtMostTheFreeSharedMemory) {
  EXPECT_EQ(default_checkpoint_memory({.mem_total = 64u << 20, .shm_free = 1u << 30}), 32u << 20);
  EXPECT_EQ(default_checkpoint_memory({.mem_total = 1u << 30, .shm_free = 100u << 20}), 100u << 20);
  const MemoryFacts here = read_memory_facts("/dev/shm");
  EXPECT_GT(here.mem_total, 0u);
  EXPECT_GT(here.shm_free, 0u);
  EXPECT_NE(describe_default(here).find("free in /dev/shm"), std::string::npos);
}

TEST(CheckpointAgreement, NewestStepEveryRankHolds) {
  EXPECT_EQ(newest_common_step({{2, 3}, {2, 3}, {2, 3}}), 3);
  EXPECT_EQ(newest_common_step({{2, 3}, {1, 2}, {2, 3}}), 2);  // one rank's save of 3 was torn
  EXPECT_EQ(newest_common_step({{3, 2}, {2}}), 2);             // order does not matter
  EXPECT_FALSE(newest_common_step({{2, 3}, {}}));              // a rank that holds nothing
  EXPECT_FALSE(newest_common_step({{4, 5}, {2, 3}}));          // nothing in common
  EXPECT_FALSE(newest_common_step({}));
  EXPECT_EQ(encode_steps({2, 3}), "2,3");
  EXPECT_EQ(encode_steps({}), "");
  EXPECT_EQ(held_keys(3), "/worker/attempt_3/ctrun/checkpoint/held/");
}

TEST(CheckpointJobDirectory, LivesUntilDestroyedAndCountsEveryByte) {
  const std::string root = temp_root();
  std::string path;
  {
    JobDirectory dir(4242, root);
    path = dir.path();
    EXPECT_EQ(path, root + "/ctrun-checkpoint-4242");
    EXPECT_EQ(fs::status(path).permissions() & fs::perms::all, fs::perms::owner_all);
    EXPECT_TRUE(fs::exists(path + "/lock"));
    EXPECT_TRUE(dir.held(0).empty());
    fs::create_directory(path + "/rank-0");
    write_file(path + "/rank-0/step-5.ckpt", 64 << 10);
    write_file(path + "/rank-0/step-4.ckpt", 64 << 10);
    write_file(path + "/rank-0/.partial-6-123", 32 << 10);
    const auto held = dir.held(0);
    ASSERT_EQ(held.size(), 2u);
    EXPECT_EQ(held[0].step, 4);
    EXPECT_EQ(held[1].step, 5);
    EXPECT_GE(held[0].bytes, 64u << 10);
    EXPECT_GE(dir.used_bytes(), (64u + 64 + 32) << 10);  // the partial save counts against the limit
  }
  EXPECT_FALSE(fs::exists(path)) << "the job's snapshots outlived the agent";
  // A leftover of the same name (a process that had our pid) is replaced, not reused.
  fs::create_directories(path + "/rank-0");
  write_file(path + "/rank-0/step-1.ckpt", 4096);
  JobDirectory again(4242, root);
  EXPECT_TRUE(again.held(0).empty());
  fs::remove_all(root);
}

TEST(CheckpointJobDirectory, ReconcileRemovesTornSavesAndPrunesToTheNewestTwo) {
  const std::string root = temp_root();
  JobDirectory dir(4243, root);
  for (int rank : {0, 1}) fs::create_directory(dir.path() + "/" + rank_dir_name(rank));
  for (int step : {1, 2, 3}) write_file(dir.path() + "/rank-0/" + step_file_name(step), 4096);
  write_file(dir.path() + "/rank-0/.partial-4-77", 8192);
  write_file(dir.path() + "/rank-1/step-3.ckpt", 4096);
  write_file(dir.path() + "/rank-1/.partial-4-78", 8192);
  write_file(dir.path() + "/rank-1/" + std::string(kSpareFile), 4096);
  const Reconciled r = dir.reconcile();
  EXPECT_EQ(r.partial_files, 2);
  EXPECT_GE(r.partial_bytes, 16384u);
  EXPECT_EQ(r.pruned_steps, 1);
  ASSERT_EQ(dir.held(0).size(), 2u);
  EXPECT_EQ(dir.held(0)[0].step, 2);
  EXPECT_EQ(dir.held(1).size(), 1u);
  EXPECT_FALSE(fs::exists(dir.path() + "/rank-0/.partial-4-77"));
  EXPECT_TRUE(fs::exists(dir.path() + "/rank-1/.spare")) << "the memory for the rank's next save was given back";
  EXPECT_EQ(dir.reconcile().partial_files, 0);
  fs::remove_all(root);
}

TEST(CheckpointJobDirectory, PinLinksEveryRanksStepOnlyWhenAllHoldItAndNeverWaitsForTheLock) {
  const std::string root = temp_root();
  {
    JobDirectory dir(4243, root);
    const std::string path = dir.path();
    for (int rank : {0, 1}) {
      fs::create_directory(path + "/rank-" + std::to_string(rank));
      write_file(path + "/rank-" + std::to_string(rank) + "/step-7.ckpt", 64 << 10);
    }
    const std::uint64_t before = dir.used_bytes();
    std::string pinned;
    EXPECT_EQ(dir.pin_step(8, {0, 1}, pinned), JobDirectory::Pin::kMissing);  // nobody holds 8
    EXPECT_EQ(pinned, "");
    EXPECT_FALSE(fs::exists(path + "/.spill-8"));
    ASSERT_EQ(dir.pin_step(7, {0, 1}, pinned), JobDirectory::Pin::kPinned);
    EXPECT_EQ(pinned, path + "/.spill-7");
    EXPECT_EQ(fs::hard_link_count(path + "/rank-1/step-7.ckpt"), 2u);
    EXPECT_TRUE(fs::exists(pinned + "/rank-0.ckpt"));
    EXPECT_EQ(dir.used_bytes(), before) << "a linked snapshot counts once against the limit";
    // A worker holding the lock (a save allocating): the agent's loop gets kBusy at once, never waits.
    const int fd = ::open((path + "/lock").c_str(), O_RDWR);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(::flock(fd, LOCK_EX), 0);
    EXPECT_EQ(dir.pin_step(7, {0, 1}, pinned), JobDirectory::Pin::kBusy);
    ::close(fd);
  }
  fs::remove_all(root);
}

TEST(CheckpointJobDirectory, SweepRemovesOnlyDirectoriesOfDeadAgents) {
  const std::string root = temp_root();
  const int dead = dead_pid();
  fs::create_directories(root + "/" + job_dir_name(dead) + "/rank-0");
  write_file(root + "/" + job_dir_name(dead) + "/rank-0/step-1.ckpt", 4096);
  fs::create_directories(root + "/" + job_dir_name(static_cast<int>(::getppid())));  // alive: kept
  fs::create_directories(root + "/ctrun-progress-1-1");                              // not ours: kept
  const auto removed = sweep_stale_job_dirs(root);
  ASSERT_EQ(removed.size(), 1u);
  EXPECT_EQ(removed[0], root + "/" + job_dir_name(dead));
  EXPECT_FALSE(fs::exists(removed[0]));
  EXPECT_TRUE(fs::exists(root + "/" + job_dir_name(static_cast<int>(::getppid()))));
  EXPECT_TRUE(fs::exists(root + "/ctrun-progress-1-1"));
  fs::remove_all(root);
}

TEST(CheckpointNotices, ParsedIntoEventsAndReceivedOnTheLoop) {
  auto commit = parse_notice(R"({"what":"commit","rank":2,"step":7,"bytes":100,"seconds":0.5})");
  ASSERT_TRUE(commit);
  EXPECT_EQ(commit->event, Event::kCheckpointCommit);
  EXPECT_EQ(commit->fields["step"], 7);
  EXPECT_FALSE(commit->fields.contains("what"));
  EXPECT_EQ(parse_notice(R"({"what":"load","rank":0,"step":null})")->event, Event::kCheckpointLoad);
  EXPECT_EQ(parse_notice(R"({"what":"refused","rank":0,"step":1})")->event, Event::kCheckpointRefused);
  for (const char* bad : {"", "{", "[]", R"({"rank":1})", R"({"what":"delete"})", R"({"what":3})"})
    EXPECT_FALSE(parse_notice(bad)) << bad;

  const std::string root = temp_root();
  const std::string path = root + "/notices.sock";
  boost::asio::io_context io;
  std::vector<Notice> got;
  NoticeSocket socket(io, path, [&](const Notice& n) {
    got.push_back(n);
    if (got.size() == 2) io.stop();
  });
  const int fd = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::snprintf(addr.sun_path, sizeof addr.sun_path, "%s", path.c_str());
  for (std::string d : {std::string("not json"), std::string(R"({"what":"commit","rank":0,"step":1})"),
                        std::string(R"({"what":"load","rank":0,"step":1})")}) {
    ASSERT_EQ(::sendto(fd, d.data(), d.size(), 0, reinterpret_cast<sockaddr*>(&addr), sizeof addr),
              static_cast<ssize_t>(d.size()));
  }
  ::close(fd);
  io.run_for(std::chrono::seconds(5));
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0].event, Event::kCheckpointCommit);
  EXPECT_EQ(got[1].event, Event::kCheckpointLoad);
  fs::remove_all(root);
}

// --checkpoint-dir-every: the first committed step is copied at once; then by steps, or by time when a duration.
TEST(SpillDue, ByStepsOrByTime) {
  SpillSettings steps;
  steps.every = 10;
  EXPECT_TRUE(spill_due(steps, 3, std::nullopt, 0));
  EXPECT_FALSE(spill_due(steps, 12, 3, 1e6));  // however long ago: 9 steps only
  EXPECT_TRUE(spill_due(steps, 13, 3, 0));
  SpillSettings timed;
  timed.every = 0;
  timed.every_seconds = 30;
  EXPECT_TRUE(spill_due(timed, 1, std::nullopt, 0));
  EXPECT_FALSE(spill_due(timed, 500, 3, 29.9));  // however many steps: not yet 30 s
  EXPECT_TRUE(spill_due(timed, 4, 3, 30.0));
  EXPECT_FALSE(spill_due(timed, 3, 3, 1e6));  // the same step is never copied twice
}

}  // namespace
}  // namespace ctrun::agent::checkpoint
