#pragma once
// Runs N copies of a program as the ranks of one job, with the environment torchrun gives its workers
// (RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT): ctbench launches itself this way
// when it is not already running under ctrun/torchrun.

#include <chrono>
#include <map>
#include <string>
#include <vector>

namespace ctrun::bench {

// Returns 0 if every rank exited 0; otherwise kills the rest and returns the first failing status (124 on
// timeout).
int spawn_ranks(int nproc, const std::vector<std::string>& argv, const std::map<std::string, std::string>& extra_env,
                std::chrono::seconds timeout);

// An unused TCP port on 127.0.0.1 (bound then released).
int free_port();

}  // namespace ctrun::bench
