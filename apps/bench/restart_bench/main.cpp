// restart_bench: restart latency, ctrun vs Debian's torchrun, on the same worker in the same run.
// The worker is this program itself (`restart_bench --worker`, a small native process, so the figure is the
// launcher's latency rather than an interpreter's start-up; `--shell-worker` uses worker.sh, a bash script, instead).
// It fails on local rank 0 in every attempt but the last, and writes timestamps: "fail" just before exiting 1,
// "start" as the first action of every worker. One gap = start of the next attempt's rank 0
// minus the failing exit. The other ranks are stopped by the launcher (SIGTERM) on each failure.
//   ctrun    --nproc-per-node=N --max-restarts R --no-python worker.sh
//   torchrun --nproc_per_node=N --max_restarts R --monitor_interval 0.1 --no_python worker.sh
//
// --baseline PATH runs another ctrun (e.g. the previous release) on the same worker too; --repeat N runs every
// launcher N times in turn (the figures are the medians of all gaps); --max-ms MS: exit 1 when ctrun's median restart
// is above MS (a drift guard; --no-torchrun leaves torchrun out for it).
//
// usage: restart_bench [--restarts 10] [--nproc 2] [--ctrun PATH] [--baseline PATH] [--no-torchrun] [--repeat 1]
//                      [--max-ms MS] [--python /usr/bin/python3] [--torchrun PATH.py] [--shell-worker 1]

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <thread>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

namespace {

// Appends "<kind> <attempt> <local_rank> <epoch seconds>" with one O_APPEND write (several workers share the file).
void record(const char* kind, int attempt, int local_rank) {
  timespec ts{};
  ::clock_gettime(CLOCK_REALTIME, &ts);
  char line[128];
  int n = std::snprintf(line, sizeof line, "%s %d %d %lld.%09ld\n", kind, attempt, local_rank,
                        static_cast<long long>(ts.tv_sec), ts.tv_nsec);
  int fd = ::open(std::getenv("BENCH_OUT"), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
  (void)!::write(fd, line, static_cast<size_t>(n));
  ::close(fd);
}

int worker_main() {
  int attempt = std::atoi(std::getenv("TORCHELASTIC_RESTART_COUNT"));
  int local_rank = std::atoi(std::getenv("LOCAL_RANK"));
  record("start", attempt, local_rank);
  if (attempt >= std::atoi(std::getenv("BENCH_RESTARTS"))) return 0;
  if (local_rank == 0) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    record("fail", attempt, local_rank);
    return 1;
  }
  ::pause();  // until the launcher stops this worker
  return 0;
}

int run(const std::vector<std::string>& argv_s, const std::string& out_file, int restarts, const std::string& tmpdir) {
  std::vector<char*> argv;
  for (const auto& a : argv_s) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  pid_t pid = ::fork();
  if (pid == 0) {
    std::freopen("/dev/null", "w", stdout);
    std::freopen("/dev/null", "w", stderr);
    ::setenv("BENCH_OUT", out_file.c_str(), 1);
    ::setenv("BENCH_RESTARTS", std::to_string(restarts).c_str(), 1);
    ::setenv("TMPDIR", tmpdir.c_str(), 1);
    ::execv(argv[0], argv.data());
    ::_exit(127);
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  return status;
}

// Gaps in seconds: start of attempt k+1's rank 0 minus the failure of attempt k.
std::vector<double> gaps(const std::string& out_file) {
  std::map<int, double> fail, start;
  std::ifstream in(out_file);
  for (std::string line; std::getline(in, line);) {
    std::istringstream s(line);
    std::string kind;
    int attempt = 0, rank = 0;
    double t = 0;
    s >> kind >> attempt >> rank >> t;
    if (rank != 0) continue;
    (kind == "fail" ? fail : start)[attempt] = t;
  }
  std::vector<double> out;
  for (const auto& [attempt, t] : fail) {
    if (start.count(attempt + 1)) out.push_back(start[attempt + 1] - t);
  }
  return out;
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

struct Launcher {
  std::string name;
  std::vector<std::string> argv;
  std::vector<double> gaps;
};

}  // namespace

int main(int argc, char** argv) {
  if (argc == 2 && std::strcmp(argv[1], "--worker") == 0) return worker_main();
  int restarts = 10;
  int nproc = 2;
  int repeat = 1;
  std::string ctrun = std::filesystem::canonical("/proc/self/exe").parent_path().string() + "/ctrun";
  std::string baseline;
  bool no_torchrun = false;
  double max_ms = 0;
  std::string python = CTRUN_TORCH_PYTHON;
  std::string torchrun = std::string(CTRUN_SHARED_DIR) + "/interop/torchrun_py311.py";
  std::string self = std::filesystem::canonical("/proc/self/exe").string();
  bool shell_worker = false;
  CLI::App app{"Restart latency: a worker's failing exit to its replacement's start, ctrun vs torchrun"};
  app.add_option("--restarts", restarts, "failing attempts per launcher (median reported)")->capture_default_str();
  app.add_option("--nproc", nproc, "workers per attempt")->capture_default_str();
  app.add_option("--ctrun", ctrun, "ctrun binary")->capture_default_str();
  app.add_option("--baseline", baseline, "another ctrun run on the same worker (e.g. the previous release)");
  app.add_flag("--no-torchrun", no_torchrun, "leave torchrun out");
  app.add_option("--repeat", repeat, "runs of every launcher, in turn")->capture_default_str();
  app.add_option("--max-ms", max_ms, "exit 1 when ctrun's median restart exceeds this many ms (0: no bound)");
  app.add_option("--python", python, "python with torch 1.13")->capture_default_str();
  app.add_option("--torchrun", torchrun, "torchrun wrapper (../shared/interop/torchrun_py311.py)")
      ->capture_default_str();
  app.add_option("--shell-worker", shell_worker, "1: the worker is a bash script instead of this binary")
      ->capture_default_str();
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    app.exit(e);
    return e.get_exit_code() == 0 ? 0 : 2;  // a bad flag exits 2, as every ctrun program
  }
  std::string tmpdir = std::filesystem::temp_directory_path().string() + "/restart_bench_" + std::to_string(::getpid());
  std::filesystem::create_directories(tmpdir);
  std::string n = std::to_string(nproc), r = std::to_string(restarts);
  std::vector<std::string> worker = {self, "--worker"};
  if (shell_worker) worker = {RESTART_BENCH_WORKER};
  auto ctrun_cmd = [&](const std::string& bin) {
    return std::vector<std::string>{bin, "--nproc-per-node=" + n, "--max-restarts", r, "--no-python"};
  };
  std::vector<Launcher> launchers = {{"ctrun", ctrun_cmd(ctrun), {}}};
  if (!baseline.empty()) launchers.push_back({"baseline", ctrun_cmd(baseline), {}});
  if (!no_torchrun) {
    launchers.push_back(
        {"torchrun",
         {python, torchrun, "--nproc_per_node=" + n, "--max_restarts", r, "--monitor_interval", "0.1", "--no_python"},
         {}});
  }
  bool ok = true;
  for (int i = 0; i < repeat; ++i) {
    for (auto& l : launchers) {
      std::vector<std::string> cmd = l.argv;
      cmd.insert(cmd.end(), worker.begin(), worker.end());
      const std::string out = tmpdir + "/" + std::to_string(i) + "_" + l.name + ".txt";
      const int status = run(cmd, out, restarts, tmpdir);
      const auto g = gaps(out);
      if (!WIFEXITED(status) || WEXITSTATUS(status) != 0 || g.size() != static_cast<size_t>(restarts)) {
        std::printf("warning: %s did not complete every restart (exit status %d, %zu gaps)\n", l.name.c_str(), status,
                    g.size());
        ok = false;
      }
      l.gaps.insert(l.gaps.end(), g.begin(), g.end());
    }
  }
  std::filesystem::remove_all(tmpdir);
  std::printf("restart_bench: nproc=%d, %d restarts per run, %d run(s) each, %s worker\n", nproc, restarts, repeat,
              shell_worker ? "bash" : "native");
  std::printf("%-10s %18s %10s %10s %6s\n", "launcher", "median restart gap", "min", "max", "gaps");
  for (const auto& l : launchers) {
    const auto& g = l.gaps;
    std::printf("%-10s %15.2f ms %7.2f ms %7.2f ms %6zu\n", l.name.c_str(), median(g) * 1e3,
                g.empty() ? 0 : *std::min_element(g.begin(), g.end()) * 1e3,
                g.empty() ? 0 : *std::max_element(g.begin(), g.end()) * 1e3, g.size());
  }
  const double cm = median(launchers[0].gaps);
  if (!no_torchrun && cm > 0) {
    const double tm = median(launchers.back().gaps);
    std::printf("ratio      1/%.0f (target 1/20: %s)\n", tm / cm, tm / cm >= 20 ? "met" : "MISSED");
  }
  const bool drifted = max_ms > 0 && cm * 1e3 > max_ms;
  if (max_ms > 0) {
    std::printf("bound: ctrun restart median %.2f ms <= %.2f ms: %s\n", cm * 1e3, max_ms,
                drifted ? "EXCEEDED" : "held");
  }
  return ok && !drifted ? 0 : 1;
}
