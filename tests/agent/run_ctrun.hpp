#pragma once
// Runs the built ctrun binary as a real process for the process tests: output captured to files, a hard
// deadline (the child is SIGKILLed past it), and helpers to wait for files that workers write.

#include <sys/types.h>

#include <chrono>
#include <map>
#include <string>
#include <vector>

namespace ctrun::agent::test {

struct RunResult {
  int exit_code = -1;  // 128+N when killed by signal N; -1 on timeout
  std::string out;
  std::string err;
};

std::string ctrun_binary();
std::string workers_dir();
std::string fresh_dir(const std::string& name);  // empty temp dir
std::string read_file(const std::string& path);

class CtrunProcess {
 public:
  // stdin_fd: what ctrun reads as stdin (it stays open in the caller); -1: /dev/null, so that a test behaves the
  // same whether ctest runs under a terminal or not (ctrun's choices depend on it: own_session_for_workers()).
  CtrunProcess(const std::vector<std::string>& args, const std::map<std::string, std::string>& env = {},
               int stdin_fd = -1);
  ~CtrunProcess();  // kills it if still running
  pid_t pid() const { return pid_; }
  RunResult wait(std::chrono::seconds deadline = std::chrono::seconds(60));

 private:
  pid_t pid_ = -1;
  std::string out_path_, err_path_;
  std::string tmp_dir_;
  bool done_ = false;
};

RunResult run_ctrun(const std::vector<std::string>& args, const std::map<std::string, std::string>& env = {},
                    std::chrono::seconds deadline = std::chrono::seconds(60));

// Waits until `count` files matching dir/prefix* exist; false after the deadline.
bool wait_for_files(const std::string& dir, const std::string& prefix, int count, std::chrono::milliseconds deadline);

// The rendezvous store an agent serves, "host:port", as its event log's agent_start reports it (rdzv_store): the
// host agent of a test is given --rdzv-endpoint HOST:0 and the others this. Empty when agent_start did not come
// within the deadline or the agent serves none.
std::string served_rdzv_store(const std::string& events_path, std::chrono::milliseconds deadline);

// True if pid exists and is not a zombie.
bool alive(pid_t pid);

}  // namespace ctrun::agent::test
