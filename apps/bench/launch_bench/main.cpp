// launch_bench: the cost of launching a job, ctrun vs Debian's torchrun, side by side in one run.
//   ctrun    --standalone --nproc-per-node=N --no-python true
//   torchrun --standalone --nproc_per_node=N --monitor_interval 0.1 --no_python true   (torch 1.13 spelling)
// Runs alternate between the two so that machine noise hits both alike. For each run: wall time, and peak RSS
// of the largest process in the launcher's tree (wait4's ru_maxrss). Prints medians and the ratios.
//
// usage: launch_bench [--runs 20] [--nproc 8] [--ctrun PATH] [--python /usr/bin/python3] [--torchrun PATH.py]

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

}  // namespace

int main(int argc, char** argv) {
  int runs = 20;
  int nproc = 8;
  std::string ctrun = self_dir() + "/ctrun";
  std::string python = CTRUN_TORCH_PYTHON;
  std::string torchrun = std::string(CTRUN_SHARED_DIR) + "/interop/torchrun_py311.py";
  CLI::App app{"Launch cost: ctrun vs torchrun starting no-op workers (median wall time and peak RSS)"};
  app.add_option("--runs", runs, "launches per launcher (median reported)")->capture_default_str();
  app.add_option("--nproc", nproc, "no-op workers per launch")->capture_default_str();
  app.add_option("--ctrun", ctrun, "ctrun binary")->capture_default_str();
  app.add_option("--python", python, "python with torch 1.13")->capture_default_str();
  app.add_option("--torchrun", torchrun, "torchrun wrapper (../shared/interop/torchrun_py311.py)")
      ->capture_default_str();
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    app.exit(e);
    return e.get_exit_code() == 0 ? 0 : 2;  // a bad flag exits 2, as every ctrun program
  }
  std::string true_bin = "/bin/true";
  std::vector<std::string> ctrun_cmd = {ctrun, "--standalone", "--nproc-per-node=" + std::to_string(nproc),
                                        "--no-python", true_bin};
  std::vector<std::string> torch_cmd = {
      python, torchrun,      "--standalone", "--nproc_per_node=" + std::to_string(nproc), "--monitor_interval",
      "0.1",  "--no_python", true_bin};
  std::string tmpdir = std::filesystem::temp_directory_path().string() + "/launch_bench_" + std::to_string(::getpid());
  std::filesystem::create_directories(tmpdir);

  std::vector<double> c_wall, c_rss, t_wall, t_rss;
  int failures = 0;
  for (int i = 0; i < runs; ++i) {
    Sample c = run_once(ctrun_cmd, tmpdir);
    Sample t = run_once(torch_cmd, tmpdir);
    if (c.status != 0 || t.status != 0) ++failures;
    c_wall.push_back(c.wall_s);
    c_rss.push_back(c.maxrss_mib);
    t_wall.push_back(t.wall_s);
    t_rss.push_back(t.maxrss_mib);
  }
  std::filesystem::remove_all(tmpdir);
  double cw = median(c_wall), tw = median(t_wall), cr = median(c_rss), tr = median(t_rss);
  std::printf("launch_bench: %d runs each, nproc=%d, workers: %s\n", runs, nproc, true_bin.c_str());
  std::printf("%-10s %14s %16s\n", "launcher", "median wall", "median peak RSS");
  std::printf("%-10s %12.2f ms %12.1f MiB\n", "ctrun", cw * 1e3, cr);
  std::printf("%-10s %12.2f ms %12.1f MiB\n", "torchrun", tw * 1e3, tr);
  std::printf("ratio      wall 1/%.0f (target 1/50: %s)   RSS 1/%.0f (target 1/20: %s)\n", tw / cw,
              tw / cw >= 50 ? "met" : "MISSED", tr / cr, tr / cr >= 20 ? "met" : "MISSED");
  if (failures) std::printf("warning: %d runs exited non-zero\n", failures);
  return failures ? 1 : 0;
}
