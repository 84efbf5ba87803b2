#pragma once
// Processes of the job that left their worker's process group (a new process group, `setsid`, a double-forked
// daemon) cannot be reached by signalling the group. They are found by a mark in their environment instead:
// ctrun puts CTRUN_JOB_TOKEN=<pid>-<random> in its own environment before it starts any worker, every descendant
// inherits it (a daemon that does not wipe its environment keeps it), and a sweep of /proc/<pid>/environ finds them.
// The agent sweeps when a worker group has ended; the guardian sweeps when ctrun dies (even `kill -9`).
// A process that clears its environment is not found (a cgroup per job would be; not used: it needs delegation).

#include <sys/types.h>

#include <string>

namespace ctrun::agent {

inline constexpr const char* kJobTokenVariable = "CTRUN_JOB_TOKEN";

// A fresh token for this ctrun ("<pid>-<64 random bits in hex>").
std::string make_job_token();

// Sends sig to every process (other than the caller) whose environment holds CTRUN_JOB_TOKEN=token. Returns how
// many were signalled. Async-signal-unsafe (allocates); fine in the guardian, which is single-threaded.
int signal_marked_processes(const std::string& token, int sig);

}  // namespace ctrun::agent
