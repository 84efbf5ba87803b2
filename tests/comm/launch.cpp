// comm_launch: a minimal stand-in for ctrun in the comm tests. Starts N copies of a program with torchrun's
// worker environment and reports their exits. Like ctrun, it hosts the workers' store itself (bound to a port of the
// kernel's choosing before any rank starts, TORCHELASTIC_USE_AGENT_STORE=True), so no port is ever picked and freed.
//
//   comm_launch [--no-kill] [--expect-exit RANK:CODE]... N PROGRAM [ARGS...]
// Exit 0 iff every rank exited 0 (or with its expected code). Without --no-kill the first failure stops the
// others (as ctrun does); with it every rank runs to its own end (failure tests watch the survivors).
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "store/server.hpp"

extern char** environ;

int main(int argc, char** argv) {
  bool no_kill = false;
  bool reap_late = false;  // leave exited ranks unreaped (zombies) until every rank has exited, as a slow launcher
  std::map<int, int> expected;
  int i = 1;
  for (; i < argc; ++i) {
    if (std::strcmp(argv[i], "--no-kill") == 0) {
      no_kill = true;
    } else if (std::strcmp(argv[i], "--reap-late") == 0) {
      reap_late = true;
    } else if (std::strcmp(argv[i], "--expect-exit") == 0 && i + 1 < argc) {
      int r = 0;
      int c = 0;
      std::sscanf(argv[++i], "%d:%d", &r, &c);
      expected[r] = c;
    } else {
      break;
    }
  }
  if (argc - i < 2) {
    std::fprintf(stderr, "usage: comm_launch [--no-kill] [--reap-late] [--expect-exit RANK:CODE] N PROGRAM [ARGS...]\n");
    return 2;
  }
  const int n = std::atoi(argv[i]);
  char** prog = argv + i + 1;
  ctrun::store::ServerOptions store_options;
  store_options.host = "127.0.0.1";
  ctrun::store::Server store(store_options);
  store.start();
  // Every environment is built before the first fork: the store's thread may hold the allocator's lock when a
  // child is forked, so a child does nothing but execve.
  std::vector<std::vector<std::string>> envs(n);
  for (int r = 0; r < n; ++r) {
    const std::map<std::string, std::string> set = {{"RANK", std::to_string(r)},
                                                    {"LOCAL_RANK", std::to_string(r)},
                                                    {"WORLD_SIZE", std::to_string(n)},
                                                    {"LOCAL_WORLD_SIZE", std::to_string(n)},
                                                    {"MASTER_ADDR", "127.0.0.1"},
                                                    {"MASTER_PORT", std::to_string(store.port())},
                                                    {"TORCHELASTIC_USE_AGENT_STORE", "True"},
                                                    {"TORCHELASTIC_RESTART_COUNT", "0"}};
    for (char** e = environ; *e; ++e) {
      const std::string entry = *e;
      if (!set.count(entry.substr(0, entry.find('=')))) envs[r].push_back(entry);
    }
    for (const auto& [k, v] : set) envs[r].push_back(k + "=" + v);
  }
  std::map<pid_t, int> ranks;
  for (int r = 0; r < n; ++r) {
    std::vector<char*> envp;
    for (auto& e : envs[r]) envp.push_back(e.data());
    envp.push_back(nullptr);
    const pid_t pid = fork();
    if (pid == 0) {
      execve(prog[0], prog, envp.data());
      _exit(127);
    }
    ranks[pid] = r;
  }
  if (reap_late) {
    // Watch for exits without reaping (WNOWAIT): an exited rank stays a zombie while its peers run on.
    std::map<pid_t, bool> exited;
    while (exited.size() < ranks.size()) {
      for (const auto& [p, r] : ranks) {
        siginfo_t info{};
        if (!exited.count(p) && waitid(P_PID, static_cast<id_t>(p), &info, WEXITED | WNOHANG | WNOWAIT) == 0 &&
            info.si_pid == p) {
          exited[p] = true;
        }
      }
      usleep(20000);
    }
  }
  int result = 0;
  for (int left = n; left > 0;) {
    int status = 0;
    const pid_t pid = waitpid(-1, &status, 0);
    if (pid < 0) break;
    --left;
    const int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    const int rank = ranks[pid];
    const int want = expected.count(rank) ? expected[rank] : 0;
    std::fprintf(stderr, "comm_launch: rank %d exited %d%s\n", rank, code, code == want ? "" : " (unexpected)");
    if (code != want && result == 0) {
      result = 1;
      if (!no_kill) {
        for (const auto& [p, r] : ranks) kill(p, SIGTERM);
      }
    }
  }
  return result;
}
