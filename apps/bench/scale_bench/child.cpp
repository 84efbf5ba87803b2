#include "apps/bench/scale_bench/child.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>
#include <iterator>
#include <sstream>
#include <stdexcept>
#include <thread>

#include <fmt/format.h>

#include "common/log.hpp"

namespace ctrun::scale_bench {

Child::Child(const std::vector<std::string>& argv) : what_(argv.empty() ? "?" : argv[0]) {
  int in[2], out[2];
  if (::pipe2(in, O_CLOEXEC) != 0 || ::pipe2(out, O_CLOEXEC) != 0)
    throw std::runtime_error(fmt::format("scale_bench: pipe: {}", std::strerror(errno)));
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  const pid_t parent = ::getpid();
  pid_ = ::fork();
  if (pid_ == 0) {
    // Only async-signal-safe calls until exec. The child dies with the bench, however the bench ends (a
    // `timeout`, Ctrl-C): no agent group or ctstore is left behind.
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(127);
    ::dup2(in[0], 0);
    ::dup2(out[1], 1);
    ::execv(args[0], args.data());
    ::_exit(127);
  }
  ::close(in[0]);
  ::close(out[1]);
  if (pid_ < 0) {
    ::close(in[1]);
    ::close(out[0]);
    throw std::runtime_error(fmt::format("scale_bench: cannot start {}: {}", what_, std::strerror(errno)));
  }
  to_child_ = in[1];
  from_child_ = ::fdopen(out[0], "r");
}

Child::~Child() {
  if (to_child_ >= 0) ::close(to_child_);
  if (from_child_) std::fclose(from_child_);
  if (pid_ > 0) {
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
  }
}

std::string Child::read_line() {
  std::string line;
  for (;;) {
    const int c = std::fgetc(from_child_);
    if (c == EOF) throw std::runtime_error(fmt::format("scale_bench: {} (pid {}) ended its output early", what_, pid_));
    if (c == '\n') return line;
    line.push_back(static_cast<char>(c));
  }
}

void Child::write_line(const std::string& line) {
  const std::string data = line + "\n";
  std::size_t off = 0;
  while (off < data.size()) {
    const auto n = ::write(to_child_, data.data() + off, data.size() - off);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) throw std::runtime_error(fmt::format("scale_bench: {} (pid {}) is gone", what_, pid_));
    off += static_cast<std::size_t>(n);
  }
}

int Child::finish(double timeout_s) {
  ::close(to_child_);
  to_child_ = -1;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  int status = 0;
  while (std::chrono::steady_clock::now() < deadline) {
    if (::waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  ::kill(pid_, SIGKILL);
  ::waitpid(pid_, nullptr, 0);
  pid_ = -1;
  return -1;
}

void begin_child_process() {
  rlimit rl{};
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
    rl.rlim_cur = rl.rlim_max;
    setrlimit(RLIMIT_NOFILE, &rl);
  }
  log::set_default_level(spdlog::level::warn);
}

double Child::cpu_seconds() const { return cpu_seconds_of(pid_); }

double cpu_seconds_of(pid_t pid) {
  double total = 0;
  const auto dir = fmt::format("/proc/{}/task", pid);
  DIR* d = ::opendir(dir.c_str());
  if (!d) return 0;
  while (auto* e = ::readdir(d)) {
    if (e->d_name[0] == '.') continue;
    std::ifstream f(fmt::format("{}/{}/schedstat", dir, e->d_name));
    unsigned long long ns = 0;
    if (f >> ns) total += static_cast<double>(ns) * 1e-9;
  }
  ::closedir(d);
  return total;
}

}  // namespace ctrun::scale_bench

namespace ctrun::scale_bench {

std::pair<double, double> Child::user_system_seconds() const {
  std::ifstream f(fmt::format("/proc/{}/stat", pid_));
  std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  const auto paren = text.rfind(')');  // the command name may hold spaces
  if (paren == std::string::npos) return {0, 0};
  std::istringstream in(text.substr(paren + 2));
  std::string field;
  for (int i = 3; i <= 13; ++i) in >> field;  // fields 3..13; 14 is utime, 15 stime
  unsigned long long utime = 0, stime = 0;
  in >> utime >> stime;
  const auto hz = static_cast<double>(::sysconf(_SC_CLK_TCK));
  return {static_cast<double>(utime) / hz, static_cast<double>(stime) / hz};
}

}  // namespace ctrun::scale_bench
