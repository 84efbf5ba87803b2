// launch_bench: the cost of launching a job, ctrun vs Debian's torchrun, side by side in one run.
//   ctrun    --standalone --nproc-per-node=N --no-python true
//   torchrun --standalone --nproc_per_node=N --monitor_interval 0.1 --no_python true   (torch 1.13 spelling)
// Runs alternate between the launchers so that machine noise hits all alike. For each run: wall time, and peak RSS
// of the largest process in the launcher's tree (wait4's ru_maxrss). Prints medians and the ratios.
// --baseline PATH adds another ctrun (e.g. the previous release) to the rotation, and each ctrun's `ctrun --version`
// (a start-up with nothing to launch: what loading the program costs). --max-ms MS: exit 1 when ctrun's median
// launch is above MS (a drift guard; --no-torchrun leaves torchrun out for it).
//
// usage: launch_bench [--runs 20] [--nproc 8] [--ctrun PATH] [--baseline PATH] [--no-torchrun] [--max-ms MS]
//                     [--python /usr/bin/python3] [--torchrun PATH.py]

#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

namespace {

struct Sample {
  double wall_s = 0;
  double maxrss_mib = 0;
  int status = 0;
};

Sample run_once(const std::vector<std::string>& argv_s, const std::string& tmpdir) {
  std::vector<char*> argv;
  for (const auto& a : argv_s) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  auto start = std::chrono::steady_clock::now();
  pid_t pid = ::fork();
  if (pid == 0) {
    std::freopen("/dev/null", "w", stdout);
    std::freopen("/dev/null", "w", stderr);
    ::setenv("TMPDIR", tmpdir.c_str(), 1);  // both launchers make a log dir under $TMPDIR
    ::execv(argv[0], argv.data());
    ::_exit(127);
  }
  int status = 0;
  rusage usage{};
  ::wait4(pid, &status, 0, &usage);
  Sample s;
  s.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  s.maxrss_mib = static_cast<double>(usage.ru_maxrss) / 1024.0;
  s.status = status;
  return s;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

std::string self_dir() { return std::filesystem::canonical("/proc/self/exe").parent_path().string(); }

struct Launcher {
  std::string name;
  std::vector<std::string> argv;
  std::vector<double> wall, rss;
  int failures = 0;
};

}  // namespace

int main(int argc, char** argv) {
  int runs = 20;
  int nproc = 8;
  std::string ctrun = self_dir() + "/ctrun";
  std::string baseline;
  bool no_torchrun = false;
  double max_ms = 0;
  std::string python = CTRUN_TORCH_PYTHON;
  std::string torchrun = std::string(CTRUN_SHARED_DIR) + "/interop/torchrun_py311.py";
  CLI::App app{"Launch cost: ctrun vs torchrun starting no-op workers (median wall time and peak RSS)"};
  app.add_option("--runs", runs, "launches per launcher (median reported)")->capture_default_str();
  app.add_option("--nproc", nproc, "no-op workers per launch")->capture_default_str();
  app.add_option("--ctrun", ctrun, "ctrun binary")->capture_default_str();
  app.add_option("--baseline", baseline, "another ctrun measured in the same rotation (e.g. the previous release)");
  app.add_flag("--no-torchrun", no_torchrun, "leave torchrun out");
  app.add_option("--max-ms", max_ms, "exit 1 when ctrun's median launch exceeds this many ms (0: no bound)");
  app.add_option("--python", python, "python with torch 1.13")->capture_default_str();
  app.add_option("--torchrun", torchrun, "torchrun wrapper (../shared/interop/torchrun_py311.py)")
      ->capture_default_str();
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    app.exit(e);
    return e.get_exit_code() == 0 ? 0 : 2;  // a bad flag exits 2, as every ctrun program
  }
  const std::string true_bin = "/bin/true";
  auto ctrun_launch = [&](const std::string& bin) {
    return std::vector<std::string>{bin, "--standalone", "--nproc-per-node=" + std::to_string(nproc), "--no-python",
                                    true_bin};
  };
  std::vector<Launcher> launchers = {{"ctrun", ctrun_launch(ctrun), {}, {}, 0},
                                     {"ctrun --version", {ctrun, "--version"}, {}, {}, 0}};
  if (!baseline.empty()) {
    launchers.push_back({"baseline", ctrun_launch(baseline), {}, {}, 0});
    launchers.push_back({"baseline --version", {baseline, "--version"}, {}, {}, 0});
  }
  if (!no_torchrun) {
    launchers.push_back({"torchrun",
                         {python, torchrun, "--standalone", "--nproc_per_node=" + std::to_string(nproc),
                          "--monitor_interval", "0.1", "--no_python", true_bin},
                         {},
                         {},
                         0});
  }
  std::string tmpdir = std::filesystem::temp_directory_path().string() + "/launch_bench_" + std::to_string(::getpid());
  std::filesystem::create_directories(tmpdir);
  int failures = 0;
  for (int i = 0; i < runs; ++i) {
    for (auto& l : launchers) {
      Sample s = run_once(l.argv, tmpdir);
      if (s.status != 0) ++l.failures, ++failures;
      l.wall.push_back(s.wall_s);
      l.rss.push_back(s.maxrss_mib);
    }
  }
  std::filesystem::remove_all(tmpdir);
  std::printf("launch_bench: %d runs each (medians), nproc=%d, workers: %s\n", runs, nproc, true_bin.c_str());
  std::printf("%-20s %14s %16s\n", "launcher", "median wall", "median peak RSS");
  for (const auto& l : launchers) {
    std::printf("%-20s %12.2f ms %12.1f MiB\n", l.name.c_str(), median(l.wall) * 1e3, median(l.rss));
  }
  const double cw = median(launchers[0].wall), cr = median(launchers[0].rss);
  if (!no_torchrun) {
    const double tw = median(launchers.back().wall), tr = median(launchers.back().rss);
    std::printf("ratio                wall 1/%.0f (target 1/50: %s)   RSS 1/%.0f (target 1/20: %s)\n", tw / cw,
                tw / cw >= 50 ? "met" : "MISSED", tr / cr, tr / cr >= 20 ? "met" : "MISSED");
  }
  for (const auto& l : launchers) {
    if (l.failures) std::printf("warning: %s: %d runs exited non-zero\n", l.name.c_str(), l.failures);
  }
  const bool drifted = max_ms > 0 && cw * 1e3 > max_ms;
  if (max_ms > 0) {
    std::printf("bound: ctrun launch median %.2f ms <= %.2f ms: %s\n", cw * 1e3, max_ms, drifted ? "EXCEEDED" : "held");
  }
  return failures || drifted ? 1 : 0;
}
