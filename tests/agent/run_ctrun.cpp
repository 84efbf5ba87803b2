#include "run_ctrun.hpp"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <filesystem>
#include <thread>

extern char** environ;

namespace ctrun::agent::test {

std::string ctrun_binary() { return std::string(CTRUN_BIN_DIR) + "/ctrun"; }
std::string workers_dir() { return CTRUN_WORKERS_DIR; }
std::string worker_script(const std::string& name) { return workers_dir() + "/" + name; }
std::map<std::string, std::string> torch_worker_env() {
  return {{"PYTHON_EXEC", CTRUN_TORCH_PYTHON}, {"GLOO_SOCKET_IFNAME", "lo"}};
}

CtrunProcess::CtrunProcess(const std::vector<std::string>& args, const std::map<std::string, std::string>& env,
                           int stdin_fd) {
  static int counter = 0;
  std::string base = std::filesystem::temp_directory_path().string() + "/ctrun_run_" + std::to_string(::getpid()) +
                     "_" + std::to_string(counter++);
  out_path_ = base + ".out";
  err_path_ = base + ".err";
  std::vector<std::string> argv_s = {ctrun_binary()};
  argv_s.insert(argv_s.end(), args.begin(), args.end());
  std::vector<std::string> env_s;
  for (char** e = environ; *e != nullptr; ++e) {
    std::string kv = *e;
    if (env.count(kv.substr(0, kv.find('='))) == 0) env_s.push_back(kv);
  }
  for (const auto& [k, v] : env) env_s.push_back(k + "=" + v);
  if (env.count("TMPDIR") == 0) {
    // ctrun makes torchrun's $TMPDIR/torchelastic_* log folder for every run: keep those out of /tmp.
    tmp_dir_ = base + ".tmp";
    std::filesystem::create_directories(tmp_dir_);
    env_s.push_back("TMPDIR=" + tmp_dir_);
  }
  std::vector<char*> argv, envp;
  for (auto& a : argv_s) argv.push_back(a.data());
  argv.push_back(nullptr);
  for (auto& e : env_s) envp.push_back(e.data());
  envp.push_back(nullptr);
  int out = ::open(out_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  int err = ::open(err_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  pid_ = ::fork();
  if (pid_ == 0) {
    int in = stdin_fd >= 0 ? stdin_fd : ::open("/dev/null", O_RDONLY);
    if (in != 0) ::dup2(in, 0);
    ::dup2(out, 1);
    ::dup2(err, 2);
    ::execve(argv[0], argv.data(), envp.data());
    ::_exit(127);
  }
  ::close(out);
  ::close(err);
}

CtrunProcess::~CtrunProcess() {
  if (!done_ && pid_ > 0) {
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
  }
  std::filesystem::remove(out_path_);
  std::filesystem::remove(err_path_);
  if (!tmp_dir_.empty()) std::filesystem::remove_all(tmp_dir_);
}

RunResult CtrunProcess::wait(std::chrono::seconds deadline) {
  RunResult run;
  auto until = std::chrono::steady_clock::now() + deadline;
  int status = 0;
  while (true) {
    pid_t r = ::waitpid(pid_, &status, WNOHANG);
    if (r == pid_) break;
    if (std::chrono::steady_clock::now() > until) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, &status, 0);
      done_ = true;
      run.out = read_file(out_path_);
      run.err = read_file(err_path_) + "\n[test] ctrun timed out and was killed";
      return run;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));  // test harness only
  }
  done_ = true;
  run.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  run.out = read_file(out_path_);
  run.err = read_file(err_path_);
  return run;
}

RunResult run_ctrun(const std::vector<std::string>& args, const std::map<std::string, std::string>& env,
                    std::chrono::seconds deadline) {
  CtrunProcess p(args, env);
  return p.wait(deadline);
}

std::string served_rdzv_store(const std::string& events_path, std::chrono::milliseconds deadline) {
  static const std::string kField = "\"rdzv_store\":\"";
  const auto until = std::chrono::steady_clock::now() + deadline;
  while (std::chrono::steady_clock::now() < until) {
    const std::string events = read_file(events_path);
    const auto start = events.find("\"agent_start\"");
    const auto eol = start == std::string::npos ? start : events.find('\n', start);
    if (eol != std::string::npos) {  // the whole line is there
      const auto at = events.find(kField, start);
      if (at == std::string::npos || at > eol) return {};
      const auto from = at + kField.size();
      return events.substr(from, events.find('"', from) - from);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return {};
}

double signal_to_exit(CtrunProcess& p, int sig, RunResult* result, const std::string& phase) {
  auto t0 = std::chrono::steady_clock::now();
  ::kill(p.pid(), sig);
  *result = p.wait(std::chrono::seconds(30));
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("[ signal-to-exit ] %-40s %.3f s\n", phase.c_str(), s);
  if (result->exit_code < 0) return -1;
  return s;
}

std::vector<std::string> c10d_agent_flags(int nnodes, const std::string& rdzv_id, const std::string& rdzv_conf,
                                          const std::string& endpoint, const std::string& local_addr,
                                          const std::string& events, const std::string& worker) {
  return {"--nnodes=" + std::to_string(nnodes),
          "--nproc-per-node=1",
          "--rdzv-backend=c10d",
          "--rdzv-endpoint=" + endpoint,
          "--rdzv-id=" + rdzv_id,
          "--local-addr=" + local_addr,
          "--rdzv-conf=" + rdzv_conf,
          "--monitor-interval=0.1",
          "--shutdown-timeout=10",
          "--event-log=" + events,
          "--no-python",
          worker};
}

C10dJob::C10dJob(std::string dir, int nnodes, std::string rdzv_id, std::string rdzv_conf, std::string worker)
    : dir_(std::move(dir)),
      rdzv_id_(std::move(rdzv_id)),
      rdzv_conf_(std::move(rdzv_conf)),
      worker_(std::move(worker)),
      nnodes_(nnodes) {}

CtrunProcess& C10dJob::start(const std::string& tag, const std::string& local_addr,
                             const std::map<std::string, std::string>& env, const std::vector<std::string>& extra) {
  const bool host = agents_.empty();
  std::vector<std::string> flags = extra;
  for (auto& f : c10d_agent_flags(nnodes_, rdzv_id_, rdzv_conf_, host ? "127.0.0.1:0" : endpoint_, local_addr,
                                  events_path(tag), worker_)) {
    flags.push_back(std::move(f));
  }
  std::map<std::string, std::string> agent_env = env;
  agent_env.emplace("OUT_DIR", dir_);
  agent_env.emplace("NODE_TAG", tag);
  agents_.push_back(std::make_unique<CtrunProcess>(flags, agent_env));
  if (host) endpoint_ = served_rdzv_store(events_path(tag), std::chrono::seconds(20));
  return *agents_.back();
}

std::vector<pid_t> worker_pids(const std::string& dir) {
  std::vector<pid_t> pids;
  std::error_code ec;
  for (auto it = std::filesystem::directory_iterator(dir, ec); !ec && it != std::filesystem::directory_iterator();
       it.increment(ec)) {
    if (it->path().filename().string().rfind("pid_", 0) == 0) pids.push_back(std::stoi(read_file(it->path())));
  }
  return pids;
}

void expect_no_worker_left(const std::vector<pid_t>& pids) {
  for (pid_t pid : pids) {
    EXPECT_TRUE(ctrun::test::eventually([pid] { return !alive(pid); }, std::chrono::seconds(1)))
        << "worker " << pid << " outlived ctrun";
    ::kill(pid, SIGKILL);
  }
}

}  // namespace ctrun::agent::test
