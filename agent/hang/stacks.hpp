#pragma once
// Python stack dumps with no code in the worker (the agent's half; the worker's half is python/sitecustomize.py,
// which ctrun puts first on every worker's PYTHONPATH). The agent names a file per rank in the log dir
// (worker_env::kStackFile) and a real-time signal (kStackSignal); the worker registers faulthandler for it and
// starts one sleeping thread whose id heads the file. request_dump() sends the signal to that thread only, and
// only when /proc/<pid>/status shows the signal caught, so a worker without the handler never dies of it.
// Then faulthandler appends every thread's Python stack to the file; last_dump() reads the newest one back.

#include <cstdint>
#include <optional>
#include <string>

namespace ctrun::agent::hang {

// SIGRTMIN+2: real-time, so never SIGUSR1/2 (forwarded for preemption) and not the two glibc keeps for itself.
int stack_signal();

// utime + stime of every thread of `pid`, in seconds (/proc/<pid>/stat); nullopt when the process is gone.
std::optional<double> cpu_seconds(int pid);

// Whether `pid` has a handler for signal `sig` (/proc/<pid>/status SigCgt).
bool catches_signal(int pid, int sig);

// What the head line of a stack file says: the worker's pid and the thread to signal.
struct StackFileHead {
  int pid = 0;
  int thread = 0;
  std::uint64_t ident = 0;  // that thread's Python ident (its block is left out of last_dump)
};
std::optional<StackFileHead> read_head(const std::string& stack_file, int pid);

enum class DumpRequest { kSent, kNoHandler, kGone };
// Asks worker `pid` for a dump into `stack_file`. kNoHandler: not a Python worker with ctrun's sitecustomize
// (or not started far enough yet); nothing was sent.
DumpRequest request_dump(int pid, const std::string& stack_file);

// Whether a dump asked of `thread` (read_head's) of `pid` is still coming: the signal is pending there, or blocked
// because its handler is writing the dump (faulthandler's handler, registered without chain, runs with its signal
// blocked). Read a dump only once this is false: a dump caught mid-write is cut short.
bool dump_in_progress(int pid, int thread, int sig);

// The size of the file now (a dump requested later starts past it).
std::uint64_t file_size(const std::string& path);
// The dump written past `offset`, without the block of ctrun's own sleeping thread (at most max_bytes from the
// end); empty when nothing was written yet.
std::string last_dump(const std::string& stack_file, std::uint64_t offset, std::uint64_t ident,
                      std::size_t max_bytes = 16 * 1024);

}  // namespace ctrun::agent::hang
