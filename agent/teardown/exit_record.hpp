#pragma once
// The end of a Python worker's program as the worker itself records it (issue 42; docs/cli.md "A finished program
// is a finished job"). ctrun's sitecustomize.py (agent/hang/python/) writes the worker's slot from the last of its
// atexit handlers, once the program's open files are flushed: the program ended, with which exit status Python
// will exit. It then registers python/exit_note.c's handler with glibc's on_exit, the first exit handler to run,
// which adds the status exit() was called with (a native crash before exit() leaves it out).
//
// One file per attempt, <root>/ctrun-exit-<agent pid>-<attempt> (root: /dev/shm), one slot per local rank, mapped
// read-only by the agent: reading a worker's record is a memory read, never a call that can block the loop.
//
// A slot (native byte order; the Python and C writers repeat these offsets):
//    0  u32 ended        1 once the program ended (Python writes it last)
//    4  i32 pid          the Python process that wrote the slot
//    8  i32 status       the exit status Python will exit with, as the program left it (0-255)
//   12  u32 flags        ExitFlags
//   16  i64 ended_ns     CLOCK_MONOTONIC when it ended
//   24  u32 exit_called  1 once exit() was called (the C handler writes it after exit_status)
//   28  i32 exit_status  the status exit() was called with

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace ctrun::agent::teardown {

inline constexpr std::size_t kSlotBytes = 64;
inline constexpr const char* kFilePrefix = "ctrun-exit-";
// In ctrun's environment: where the files are made instead of /dev/shm (a container's or a chroot's view of a
// shared directory; the torch 2.6 tests use a folder the chroot sees).
inline constexpr const char* kRootVariable = "CTRUN_EXIT_RECORD_ROOT";

enum ExitFlags : std::uint32_t {
  kUncaught = 1,     // an uncaught exception ended the program (sys.last_value is set)
  kSystemExit = 2,   // SystemExit ended it (sys.exit, exit(), raise SystemExit): status is its code's
  kFlushFailed = 4,  // a file the program left open could not be flushed (its data may be lost)
};

struct ExitRecord {
  bool ended = false;
  int pid = 0;
  int status = 0;
  std::uint32_t flags = 0;
  std::int64_t ended_ns = 0;
  bool exit_called = false;
  int exit_status = 0;
};

// One slot's record, read in the writers' order (a field is read only after the flag written after it).
ExitRecord read_slot(const unsigned char* slot);

// One attempt's file. Made before the attempt's workers start, removed with the object (after they all exited).
class ExitRecords {
 public:
  // Throws std::runtime_error saying what failed.
  ExitRecords(const std::string& root, int agent_pid, std::uint64_t attempt, int local_ranks);
  ~ExitRecords();
  ExitRecords(const ExitRecords&) = delete;
  ExitRecords& operator=(const ExitRecords&) = delete;

  const std::string& path() const { return path_; }
  // The variables a worker of `local_rank` gets (common/worker_env.hpp: kExitRecord, kExitSlot).
  std::map<std::string, std::string> env_for(int local_rank) const;
  // What the worker of `local_rank` recorded so far (nothing: ended is false).
  ExitRecord read(int local_rank) const;

 private:
  std::string path_;
  const unsigned char* map_ = nullptr;
  int local_ranks_ = 0;
};

// Removes the exit-record files of agents that are gone (a ctrun killed with SIGKILL cannot remove its own).
std::vector<std::string> sweep_stale_exit_records(const std::string& root);

}  // namespace ctrun::agent::teardown
