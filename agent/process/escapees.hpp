#pragma once
// Processes of the job that left their worker's process group (a new process group, `setsid`, a double-forked
// daemon) cannot be reached by signalling the group. They are found by a mark in their environment instead:
// ctrun puts CTRUN_JOB_TOKEN=<pid>-<random> in its own environment before it starts any worker, every descendant
// inherits it (a daemon that does not wipe its environment keeps it), and a sweep of /proc/<pid>/environ finds them.
// The agent sweeps when a worker group has ended; the guardian sweeps when ctrun dies (even `kill -9`).
// A process that clears its environment is not found by the mark; while ctrun lives it is found anyway: ctrun is
// the child subreaper of its workers (PR_SET_CHILD_SUBREAPER), so an orphaned descendant (a double-forked daemon)
// becomes ctrun's child, and the agent kills and reaps its children that are not workers when a group ends.
// After `kill -9` of ctrun such a process goes to init and only the mark finds it (a cgroup per job would; not
// used: it needs delegation).

#include <sys/types.h>

#include <string>
#include <vector>

namespace ctrun::agent {

inline constexpr const char* kJobTokenVariable = "CTRUN_JOB_TOKEN";

// A fresh token for this ctrun ("<pid>-<64 random bits in hex>").
std::string make_job_token();

// Sends sig to every process (other than the caller and `spare`) whose environment holds CTRUN_JOB_TOKEN=token:
// the caller's descendants when it is a subreaper (where every descendant stays), otherwise every process.
// Returns how many were signalled. Async-signal-unsafe (allocates); fine in the guardian, which is single-threaded.
// `spare`: ctrun's own helpers that carry the mark and outlive an attempt (--preload's warm process).
int signal_marked_processes(const std::string& token, int sig, const std::vector<pid_t>& spare = {});

// Makes the caller the child subreaper of its descendants (orphans are reparented to it). False if refused.
bool become_subreaper();
bool is_subreaper();
// SIGKILLs every child of the caller whose pid is not in `keep` (adopted orphans: the caller must be a
// subreaper). Returns how many were signalled. Their exit is reaped by reap_adopted().
int kill_adopted(const std::vector<pid_t>& keep);
// Reaps, without blocking, exited children whose pid is not in `keep`. Returns how many.
int reap_adopted(const std::vector<pid_t>& keep);

}  // namespace ctrun::agent
