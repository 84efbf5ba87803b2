// The warm process of --preload with real Python: a worker forked from it must behave as `python -u ...` does.
// Each semantic test runs the same command cold (fork + exec, as ctrun does without --preload) and forked from
// a warm process, and compares what the program prints and how it ends.

#include "agent/preload/warm_process.hpp"

#include "agent/preload/preload_plan.hpp"

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <boost/asio/io_context.hpp>
#include <chrono>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "agent/process/worker_process.hpp"
#include "tests/agent/run_ctrun.hpp"

extern char** environ;

namespace ctrun::agent::preload {
namespace {

using namespace std::chrono_literals;

std::string python() { return CTRUN_TORCH_PYTHON; }
std::string preload_dir() { return std::string(CTRUN_WORKERS_DIR) + "/preload"; }

std::vector<std::string> parent_env(const std::map<std::string, std::string>& extra = {}) {
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    std::string entry(*e);
    if (extra.contains(entry.substr(0, entry.find('=')))) continue;
    env.push_back(entry);
  }
  for (const auto& [k, v] : extra) env.push_back(k + "=" + v);
  return env;
}

struct Ended {
  int status = -1;
  std::string out;
  std::string err;
};

std::string read_all(int fd) {
  std::string out;
  char buf[4096];
  ssize_t n;
  while ((n = ::read(fd, buf, sizeof buf)) > 0) out.append(buf, static_cast<std::size_t>(n));
  ::close(fd);
  return out;
}

// A worker's stdout and stderr: pipes whose read ends the test keeps.
struct Pipes {
  int out[2] = {-1, -1};
  int err[2] = {-1, -1};
  Pipes() {
    EXPECT_EQ(::pipe2(out, O_CLOEXEC), 0);
    EXPECT_EQ(::pipe2(err, O_CLOEXEC), 0);
  }
  void close_write_ends() {
    ::close(out[1]);
    ::close(err[1]);
  }
};

// Cold: ctrun's own fork + exec.
Ended run_cold(const std::vector<std::string>& argv, const std::vector<std::string>& env, const std::string& cwd) {
  Pipes p;
  SpawnRequest req;
  req.argv = argv;
  req.env = env;
  req.stdout_fd = p.out[1];
  req.stderr_fd = p.err[1];
  auto old = std::filesystem::current_path();
  std::filesystem::current_path(cwd);
  pid_t pid = spawn_worker(req);
  std::filesystem::current_path(old);
  p.close_write_ends();
  Ended e;
  e.out = read_all(p.out[0]);
  e.err = read_all(p.err[0]);
  ::waitpid(pid, &e.status, 0);
  return e;
}

// The probe's JSON without the values that differ between any two processes.
nlohmann::json probe_facts(const std::string& out) {
  auto j = nlohmann::json::parse(out);
  j.erase("random");
  return j;
}

class WarmTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (python().empty()) GTEST_SKIP() << "no python3";
  }

  // Starts a warm process for `argv` and runs the loop until it is ready or lost (bounded).
  void start(std::vector<std::string> modules, const std::vector<std::string>& argv, const std::string& cwd,
             std::vector<std::string> env = parent_env(), std::string program = "") {
    auto old = std::filesystem::current_path();
    std::filesystem::current_path(cwd);
    WarmOptions o;
    o.modules = std::move(modules);
    o.worker_argv = argv;
    o.env = std::move(env);
    o.program = std::move(program);
    WarmEvents ev;
    ev.ready = [this] { ready_ = true; };
    ev.lost = [this](const std::string& why) { lost_ = why; };
    ev.exited = [this](pid_t pid, int status) {
      exits_[pid] = status;
      warm_->release(pid);
    };
    warm_ = std::make_unique<WarmProcess>(io_, std::move(o), std::move(ev));
    std::filesystem::current_path(old);
    ASSERT_TRUE(run_until([this] { return ready_ || lost_; }, 120s)) << "the warm process neither ready nor lost";
  }

  bool run_until(const std::function<bool()>& done, std::chrono::milliseconds limit) {
    const auto deadline = std::chrono::steady_clock::now() + limit;
    while (!done()) {
      if (std::chrono::steady_clock::now() > deadline) return false;
      io_.restart();
      io_.run_for(10ms);
    }
    return true;
  }

  Ended run_warm(const std::vector<std::string>& argv, const std::vector<std::string>& env, const std::string& cwd) {
    Pipes p;
    ForkRequest req;
    req.argv = argv;
    req.env = env;
    req.cwd = cwd;
    req.stdout_fd = p.out[1];
    req.stderr_fd = p.err[1];
    pid_t pid = -1;
    try {
      pid = warm_->fork_worker(req);
    } catch (...) {
      p.close_write_ends();
      throw;
    }
    p.close_write_ends();
    Ended e;
    e.out = read_all(p.out[0]);
    e.err = read_all(p.err[0]);
    EXPECT_TRUE(run_until([&] { return exits_.contains(pid); }, 30s)) << "no exit reported for " << pid;
    e.status = exits_[pid];
    return e;
  }

  // The probe run cold and forked (both must end with 0): its facts from each, {cold, warm}.
  std::pair<nlohmann::json, nlohmann::json> probe_cold_and_warm(const std::vector<std::string>& argv,
                                                                const std::vector<std::string>& env,
                                                                const std::string& cwd) {
    Ended cold = run_cold(argv, env, cwd);
    Ended warm = run_warm(argv, env, cwd);
    EXPECT_EQ(cold.status, 0) << cold.err;
    EXPECT_EQ(warm.status, 0) << warm.err;
    return {probe_facts(cold.out), probe_facts(warm.out)};
  }

  boost::asio::io_context io_;
  std::unique_ptr<WarmProcess> warm_;
  bool ready_ = false;
  std::optional<std::string> lost_;
  std::map<pid_t, int> exits_;
};

std::vector<std::string> cmd(std::initializer_list<std::string> rest) {
  std::vector<std::string> argv{python(), "-u"};
  argv.insert(argv.end(), rest);
  return argv;
}

TEST_F(WarmTest, ScriptSeesWhatPythonGivesIt) {
  const std::string dir = test::fresh_dir("preload_script");
  // A relative script path through a symlink: __file__ is absolute, sys.path[0] the real directory.
  std::filesystem::create_directory_symlink(preload_dir(), dir + "/link");
  auto argv = cmd({"link/probe.py", "--flag", "value with spaces"});
  start({"json"}, argv, dir);
  ASSERT_TRUE(ready_) << *lost_;
  auto [c, w] = probe_cold_and_warm(argv, parent_env({{"RANK", "3"}}), dir);
  EXPECT_EQ(w, c) << "cold: " << c.dump(1) << "\nwarm: " << w.dump(1);
  EXPECT_EQ(w["rank"], "3");
  EXPECT_EQ(w["c_rank"], "3");
  EXPECT_EQ(w["path0"], std::filesystem::canonical(preload_dir()).string());
}

TEST_F(WarmTest, ModuleRunsAsPythonDashM) {
  auto argv = cmd({"-m", "probe_pkg.main", "a", "b"});
  start({}, argv, preload_dir());
  ASSERT_TRUE(ready_) << *lost_;
  auto [c, w] = probe_cold_and_warm(argv, parent_env(), preload_dir());
  EXPECT_EQ(w, c) << "cold: " << c.dump(1) << "\nwarm: " << w.dump(1);
  EXPECT_EQ(w["package"], "probe_pkg");
}

TEST_F(WarmTest, EndsAsPythonEnds) {
  auto base = cmd({"ends.py", "code"});
  start({"json"}, base, preload_dir());
  ASSERT_TRUE(ready_) << *lost_;
  for (std::string how : {"code", "message", "raise", "syntax", "none"}) {
    SCOPED_TRACE(how);
    auto argv = cmd({"ends.py", how});
    Ended cold = run_cold(argv, parent_env(), preload_dir());
    Ended warm = run_warm(argv, parent_env(), preload_dir());
    EXPECT_EQ(warm.status, cold.status);
    EXPECT_EQ(warm.out, cold.out);
    EXPECT_EQ(warm.err, cold.err);  // the traceback too: no frame of the warm process shows
  }
  EXPECT_EQ(WEXITSTATUS(run_warm(cmd({"ends.py", "code"}), parent_env(), preload_dir()).status), 3);
}

TEST_F(WarmTest, MultiprocessingSpawnFindsMain) {
  auto argv = cmd({"mp_spawn.py"});
  start({"multiprocessing"}, argv, preload_dir());
  ASSERT_TRUE(ready_) << *lost_;
  auto env = parent_env({{"RANK", "5"}});
  Ended cold = run_cold(argv, env, preload_dir());
  Ended warm = run_warm(argv, env, preload_dir());
  EXPECT_EQ(warm.status, 0) << warm.err;
  EXPECT_EQ(warm.out, "285 5\n");
  EXPECT_EQ(warm.out, cold.out);
}

// sitecustomize ran in the warm process with the job's environment; its per-worker part runs again in each worker.
TEST_F(WarmTest, SitecustomizeHookRunsWithTheWorkersEnvironment) {
  const std::string dir = test::fresh_dir("preload_site");
  {
    std::ofstream site(dir + "/sitecustomize.py");
    site << "import os\nSEEN = os.environ.get('RANK')\n"
            "def ctrun_worker_started():\n    global SEEN\n    SEEN = os.environ.get('RANK')\n";
  }
  auto env = parent_env({{"PYTHONPATH", dir}});
  auto argv = cmd({"-c", "import sitecustomize; print(sitecustomize.SEEN)"});
  start({}, argv, preload_dir(), env);
  ASSERT_TRUE(ready_) << *lost_;
  auto rank_env = parent_env({{"PYTHONPATH", dir}, {"RANK", "7"}});
  EXPECT_EQ(run_cold(argv, rank_env, preload_dir()).out, "7\n");
  EXPECT_EQ(run_warm(argv, rank_env, preload_dir()).out, "7\n");
}

TEST_F(WarmTest, MissingScriptIsExitTwo) {
  start({}, cmd({"probe.py"}), preload_dir());
  ASSERT_TRUE(ready_) << *lost_;
  auto argv = cmd({"no_such_script.py"});
  Ended cold = run_cold(argv, parent_env(), preload_dir());
  Ended warm = run_warm(argv, parent_env(), preload_dir());
  EXPECT_EQ(WEXITSTATUS(warm.status), 2);
  EXPECT_EQ(warm.status, cold.status);
  EXPECT_EQ(warm.err, cold.err);
}

TEST_F(WarmTest, RandomStateIsReseededPerWorker) {
  auto argv = cmd({"rng.py"});
  start({"numpy"}, argv, preload_dir());
  ASSERT_TRUE(ready_) << *lost_;
  auto a = nlohmann::json::parse(run_warm(argv, parent_env(), preload_dir()).out);
  auto b = nlohmann::json::parse(run_warm(argv, parent_env(), preload_dir()).out);
  EXPECT_NE(a["random"], b["random"]);
  EXPECT_NE(a["numpy"], b["numpy"]);
}

// stdin, like stdout and stderr, is the descriptor ctrun passes; the CPU affinity is the rank's slice.
TEST_F(WarmTest, StdinAndAffinityAreTheRequests) {
  start({}, cmd({"probe.py"}), preload_dir());
  ASSERT_TRUE(ready_) << *lost_;
  int in[2];
  ASSERT_EQ(::pipe2(in, O_CLOEXEC), 0);
  ASSERT_EQ(::write(in[1], "line from ctrun\n", 16), 16);
  ::close(in[1]);
  Pipes p;
  ForkRequest req{cmd({"-c", "import os, sys; print(sys.stdin.read().strip(), sorted(os.sched_getaffinity(0)))"}),
                  parent_env()};
  req.stdin_fd = in[0];
  req.stdout_fd = p.out[1];
  req.stderr_fd = p.err[1];
  req.cpus = {0};
  pid_t pid = warm_->fork_worker(req);
  ::close(in[0]);
  p.close_write_ends();
  EXPECT_EQ(read_all(p.out[0]), "line from ctrun [0]\n");
  EXPECT_EQ(read_all(p.err[0]), "");
  ASSERT_TRUE(run_until([&] { return exits_.contains(pid); }, 10s));
  EXPECT_EQ(exits_[pid], 0);
}

// A rank whose job-wide variable or interpreter differs from the warm process's starts cold.
TEST_F(WarmTest, WhyColdNamesWhatDiffers) {
  auto env = parent_env({{"OMP_NUM_THREADS", "2"}});
  start({}, cmd({"probe.py"}), preload_dir(), env);
  ASSERT_TRUE(ready_) << *lost_;
  EXPECT_EQ(why_cold(*warm_, cmd({"probe.py"}), parent_env({{"OMP_NUM_THREADS", "2"}, {"RANK", "1"}})), std::nullopt);
  EXPECT_EQ(why_cold(*warm_, cmd({"probe.py"}), parent_env({{"OMP_NUM_THREADS", "3"}})),
            "a job-wide variable differs: OMP_NUM_THREADS (warm process: '2', this rank: '3')");
  EXPECT_NE(why_cold(*warm_, {"/other/python3", "-u", "probe.py"}, env), std::nullopt);
}

TEST_F(WarmTest, ThreadStartedAtImportIsRefused) {
  start({"json", "starts_thread"}, cmd({"probe.py"}), preload_dir());
  ASSERT_TRUE(lost_.has_value()) << "a warm process with a thread was accepted";
  EXPECT_NE(lost_->find("importing starts_thread started 1 thread(s): started-at-import"), std::string::npos) << *lost_;
  EXPECT_THROW(warm_->fork_worker(ForkRequest{cmd({"probe.py"}), parent_env()}), PreloadError);
}

TEST_F(WarmTest, FailedImportIsRefused) {
  start({"no_such_module_anywhere"}, cmd({"probe.py"}), preload_dir());
  ASSERT_TRUE(lost_.has_value());
  EXPECT_NE(lost_->find("importing no_such_module_anywhere failed: ModuleNotFoundError"), std::string::npos) << *lost_;
}

TEST_F(WarmTest, WorkerSignalsDoNotReachTheWarmProcess) {
  start({}, cmd({"probe.py"}), preload_dir());
  ASSERT_TRUE(ready_) << *lost_;
  Pipes p;
  ForkRequest req{cmd({"-c", "import signal, time; signal.pause()"}), parent_env()};
  req.stdout_fd = p.out[1];
  req.stderr_fd = p.err[1];
  pid_t pid = warm_->fork_worker(req);
  p.close_write_ends();
  EXPECT_EQ(::getpgid(pid), pid);
  ASSERT_EQ(::killpg(pid, SIGUSR1), 0);  // as ctrun forwards it: to the worker's process group
  ASSERT_TRUE(run_until([&] { return exits_.contains(pid); }, 10s));
  EXPECT_TRUE(WIFSIGNALED(exits_[pid]) && WTERMSIG(exits_[pid]) == SIGUSR1);
  EXPECT_TRUE(test::alive(warm_->pid()));
  EXPECT_EQ(warm_->state(), WarmProcess::State::kReady);
  ::close(p.out[0]);
  ::close(p.err[0]);
}

TEST_F(WarmTest, WorkersDieWithTheWarmProcess) {
  start({}, cmd({"probe.py"}), preload_dir());
  ASSERT_TRUE(ready_) << *lost_;
  ForkRequest req{cmd({"-c", "import time; time.sleep(60)"}), parent_env()};
  pid_t a = warm_->fork_worker(req);
  pid_t b = warm_->fork_worker(req);
  ASSERT_EQ(::kill(warm_->pid(), SIGKILL), 0);
  ASSERT_TRUE(run_until([&] { return lost_.has_value() && exits_.size() == 2; }, 10s));
  EXPECT_NE(lost_->find("killed by SIGKILL"), std::string::npos) << *lost_;
  EXPECT_TRUE(run_until([&] { return !test::alive(a) && !test::alive(b); }, 5s)) << "workers outlived it";
  EXPECT_THROW(warm_->fork_worker(req), PreloadError);
}

// Its socket closes long before its exit status exists (a dying process under load): what it died of is still said,
// and a fork request in between starts nothing and is refused at once.
TEST_F(WarmTest, AClosedSocketWaitsForTheExitStatus) {
  start({}, cmd({"probe.py"}), preload_dir(), parent_env({{"LINGER", "0.5"}}),
        preload_dir() + "/warm_closes_then_exits.py");
  ASSERT_TRUE(ready_) << *lost_;
  std::this_thread::sleep_for(200ms);  // its socket is closed now, and it lives on for 0.4 s
  EXPECT_THROW(warm_->fork_worker({cmd({"-c", "pass"}), parent_env()}), PreloadError);
  const pid_t pid = warm_->pid();
  ASSERT_TRUE(run_until([&] { return lost_.has_value(); }, 10s));
  EXPECT_EQ(*lost_, "died (exit code 7)");
  EXPECT_TRUE(warm_->reaped());
  EXPECT_FALSE(test::alive(pid));
}

// kill -9 of the process that started the warm process (ctrun) leaves neither it nor its workers behind.
TEST(WarmProcessDeath, DiesWithItsStarter) {
  if (python().empty()) GTEST_SKIP() << "no python3";
  int report[2];
  ASSERT_EQ(::pipe(report), 0);
  pid_t starter = ::fork();
  ASSERT_GE(starter, 0);
  if (starter == 0) {
    ::close(report[0]);
    boost::asio::io_context io;
    bool ready = false;
    WarmProcess warm(io, WarmOptions{{}, cmd({"probe.py"}), parent_env(), ""}, WarmEvents{[&] { ready = true; }});
    for (int i = 0; i < 3000 && !ready; ++i) {
      io.restart();
      io.run_for(10ms);
    }
    pid_t pids[2] = {warm.pid(),
                     ready ? warm.fork_worker({cmd({"-c", "import time; time.sleep(60)"}), parent_env()}) : -1};
    (void)!::write(report[1], pids, sizeof pids);
    ::pause();
    ::_exit(0);
  }
  ::close(report[1]);
  pid_t pids[2] = {-1, -1};
  ASSERT_EQ(::read(report[0], pids, sizeof pids), static_cast<ssize_t>(sizeof pids));
  ::close(report[0]);
  ASSERT_GT(pids[1], 0) << "the warm process did not become ready";
  ASSERT_TRUE(test::alive(pids[0]) && test::alive(pids[1]));
  ::kill(starter, SIGKILL);
  ::waitpid(starter, nullptr, 0);
  const auto deadline = std::chrono::steady_clock::now() + 5s;
  while ((test::alive(pids[0]) || test::alive(pids[1])) && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(10ms);
  EXPECT_FALSE(test::alive(pids[0])) << "the warm process outlived its starter";
  EXPECT_FALSE(test::alive(pids[1])) << "a worker outlived the warm process";
}

// torch's @record writes the worker's error file as it does in a cold worker.
TEST_F(WarmTest, RecordWritesTheErrorFile) {
  const std::string dir = test::fresh_dir("preload_record");
  auto argv = cmd({"ends.py", "record"});
  start({"torch"}, argv, preload_dir());
  if (lost_ && lost_->find("No module named 'torch'") != std::string::npos) GTEST_SKIP() << "no torch";
  ASSERT_TRUE(ready_) << *lost_;
  for (std::string mode : {"cold", "warm"}) {
    SCOPED_TRACE(mode);
    const std::string file = dir + "/" + mode + ".json";
    auto env = parent_env({{"TORCHELASTIC_ERROR_FILE", file}});
    Ended e = mode == "cold" ? run_cold(argv, env, preload_dir()) : run_warm(argv, env, preload_dir());
    EXPECT_EQ(WEXITSTATUS(e.status), 1) << e.err;
    auto j = nlohmann::json::parse(test::read_file(file));
    EXPECT_NE(j["message"]["message"].get<std::string>().find("ValueError: raised by the worker"), std::string::npos)
        << j.dump();
  }
  // torch seeds its CPU generator at random when imported (ATen: random_device): each worker has its own seed.
  auto rng = cmd({"rng.py", "torch"});
  auto a = nlohmann::json::parse(run_warm(rng, parent_env(), preload_dir()).out);
  auto b = nlohmann::json::parse(run_warm(rng, parent_env(), preload_dir()).out);
  EXPECT_NE(a["torch_initial_seed"], b["torch_initial_seed"]);
}

}  // namespace
}  // namespace ctrun::agent::preload
