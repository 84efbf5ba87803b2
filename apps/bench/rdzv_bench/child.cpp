#include "apps/bench/rdzv_bench/child.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>
#include <stdexcept>
#include <thread>

#include <fmt/format.h>

extern char** environ;

namespace ctrun::rdzv_bench {

Child::Child(const std::vector<std::string>& argv) : what_(argv.empty() ? "?" : argv[0]) {
  int in[2], out[2];
  if (::pipe2(in, O_CLOEXEC) != 0 || ::pipe2(out, O_CLOEXEC) != 0)
    throw std::runtime_error(fmt::format("rdzv_bench: pipe: {}", std::strerror(errno)));
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, in[0], 0);
  posix_spawn_file_actions_adddup2(&fa, out[1], 1);
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  const int rc = ::posix_spawn(&pid_, args[0], &fa, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  ::close(in[0]);
  ::close(out[1]);
  if (rc != 0) {
    ::close(in[1]);
    ::close(out[0]);
    throw std::runtime_error(fmt::format("rdzv_bench: cannot start {}: {}", what_, std::strerror(rc)));
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
    if (c == EOF) throw std::runtime_error(fmt::format("rdzv_bench: {} (pid {}) ended its output early", what_, pid_));
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
    if (n <= 0) throw std::runtime_error(fmt::format("rdzv_bench: {} (pid {}) is gone", what_, pid_));
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

double Child::cpu_seconds() const {
  double total = 0;
  const auto dir = fmt::format("/proc/{}/task", pid_);
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

}  // namespace ctrun::rdzv_bench
