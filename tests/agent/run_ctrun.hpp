#pragma once
// Runs the built ctrun binary as a real process for the process tests: output captured to files, a hard
// deadline (the child is SIGKILLed past it); the workers in tests/agent/workers, and the served rendezvous store.

#include <sys/types.h>

#include <chrono>
#include <map>
#include <string>
#include <vector>

#include "tests/support/files.hpp"
#include "tests/support/proc.hpp"
#include "tests/support/wait.hpp"

namespace ctrun::agent::test {

// The shared helpers the agent's process tests use with ctrun (tests/support/), by their short names here.
using ctrun::test::alive;
using ctrun::test::count_of;
using ctrun::test::fresh_dir;
using ctrun::test::read_file;
using ctrun::test::wait_for_files;
using ctrun::test::wait_for_text;

struct RunResult {
  int exit_code = -1;  // 128+N when killed by signal N; -1 on timeout
  std::string out;
  std::string err;
};

std::string ctrun_binary();
std::string workers_dir();
// A worker program of tests/agent/workers by its name there, e.g. "wait_term.sh" or "preload/rng.py".
std::string worker_script(const std::string& name);
// The environment for python workers that import torch: PYTHON_EXEC the configured torch python, gloo on loopback.
std::map<std::string, std::string> torch_worker_env();

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

// The rendezvous store an agent serves, "host:port", as its event log's agent_start reports it (rdzv_store): the
// host agent of a test is given --rdzv-endpoint HOST:0 and the others this. Empty when agent_start did not come
// within the deadline or the agent serves none.
std::string served_rdzv_store(const std::string& events_path, std::chrono::milliseconds deadline);

// The pids the workers of tests/agent/workers wrote into dir, one file pid_<local rank> each.
std::vector<pid_t> worker_pids(const std::string& dir);

// Once ctrun is gone, none of these workers may be: a test failure names each survivor (after 1 s of grace for the
// kernel to finish them), and survivors are SIGKILLed so that a failing test leaves nothing behind.
void expect_no_worker_left(const std::vector<pid_t>& pids);

}  // namespace ctrun::agent::test
