#pragma once
// The orphan guardian: a tiny helper process that outlives ctrun by a moment and kills every worker process group
// ctrun told it about. PR_SET_PDEATHSIG reaches only direct children, so a worker's own children (a data loader,
// `sh -c 'sleep 300 & wait'`) would survive a `kill -9` of ctrun without it.
//
// start_guardian() forks the helper (call it before any thread exists). ctrun keeps the write end of a CLOEXEC
// pipe; the helper blocks on the read end. When ctrun dies for any reason the kernel closes the write end, the
// helper reads EOF, SIGKILLs every process group still registered, and exits. It ignores the terminal's signals
// (Ctrl-C reaches the whole foreground group) so it cannot die before ctrun.

#include <sys/types.h>

#include <string>

namespace ctrun::agent {

// Forks the guardian. Returns false (and ctrun runs without one) if the pipe or fork fails. job_token: the mark
// (agent/process/escapees.hpp) by which, after the groups, it finds and kills processes that left them; empty: none.
bool start_guardian(const std::string& job_token = {});
// The guardian's pid (a child of ctrun that the agent must never reap or kill); -1 if none was started.
pid_t guardian_pid();
// A worker's process group (its pid: workers call setsid) exists: kill it if ctrun dies.
void guardian_watch(pid_t pgid);
// The group is gone (its leader was reaped and the group signalled): forget it, so a recycled id is never hit.
void guardian_forget(pid_t pgid);
// ctrun's job is over and it swept what escaped the groups itself (WorkerGroup::end_attempt): the guardian still
// kills any group left registered when ctrun exits, but skips its scan of every process for the job's mark.
void guardian_release();

}  // namespace ctrun::agent
