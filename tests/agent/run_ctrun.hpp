#pragma once
// Runs the built ctrun binary as a real process for the process tests: output captured to files, a hard
// deadline (the child is SIGKILLed past it); the workers in tests/agent/workers, and the served rendezvous store.

#include <sys/types.h>

#include <chrono>
#include <deque>
#include <map>
#include <memory>
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

// Sends sig to p and waits for it (30 s at most): the seconds from the signal to its end, -1 when it did not end
// (then killed); what it said in *result. Prints "[ signal-to-exit ] PHASE S s", the figure the signal tests report.
double signal_to_exit(CtrunProcess& p, int sig, RunResult* result, const std::string& phase);

// The flags of one agent of a c10d job on this machine, as the multi-node process tests run it: nnodes nodes of one
// worker (a --no-python program), rendezvous rdzv_id at endpoint with --rdzv-conf rdzv_conf, --local-addr
// local_addr, its event log at events, a 0.1 s monitor interval and a 10 s shutdown timeout.
std::vector<std::string> c10d_agent_flags(int nnodes, const std::string& rdzv_id, const std::string& rdzv_conf,
                                          const std::string& endpoint, const std::string& local_addr,
                                          const std::string& events, const std::string& worker);

// Agents of one c10d job on this machine (c10d_agent_flags), each named by a tag: the first one started hosts the
// rendezvous store (endpoint 127.0.0.1:0, a port of the kernel's choosing, read back from its event log), the
// others join at the endpoint it serves. Agent TAG logs its events to DIR/TAG.jsonl; its workers get OUT_DIR=DIR
// and NODE_TAG=TAG (tests/agent/workers/exit_or_wait.sh). The agents still running at the end are killed.
class C10dJob {
 public:
  C10dJob(std::string dir, int nnodes, std::string rdzv_id, std::string rdzv_conf, std::string worker);
  // Agent tag at local_addr (127.0.0.x), extra flags before the job's, env added to its environment. Starting the
  // host waits for the endpoint it serves (20 s at most): endpoint() is empty when it reported none.
  CtrunProcess& start(const std::string& tag, const std::string& local_addr,
                      const std::map<std::string, std::string>& env = {}, const std::vector<std::string>& extra = {});
  const std::string& endpoint() const { return endpoint_; }
  std::string events_path(const std::string& tag) const { return dir_ + "/" + tag + ".jsonl"; }

 private:
  std::string dir_, rdzv_id_, rdzv_conf_, worker_, endpoint_;
  int nnodes_;
  std::deque<std::unique_ptr<CtrunProcess>> agents_;
};

// The pids the workers of tests/agent/workers wrote into dir, one file pid_<local rank> each.
std::vector<pid_t> worker_pids(const std::string& dir);

// Once ctrun is gone, none of these workers may be: a test failure names each survivor (after 1 s of grace for the
// kernel to finish them), and survivors are SIGKILLed so that a failing test leaves nothing behind.
void expect_no_worker_left(const std::vector<pid_t>& pids);

}  // namespace ctrun::agent::test
