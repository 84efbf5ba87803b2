#pragma once
// A failed worker and torchrun's failure summary (ChildFailedError.format_msg in torch/distributed/elastic/multiprocessing/errors), byte for
// byte, plus the signal name after the exit code as newer torchrun prints it.

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

namespace ctrun::agent {

struct WorkerFailure {
  int local_rank = 0;
  int global_rank = 0;
  pid_t pid = 0;
  int exitcode = 0;              // torchrun's convention: -N when killed by signal N
  std::string error_file;        // the worker's error.json, or "<N/A>" when it wrote none
  std::string message;           // the traceback field (already indented as torchrun does)
  std::int64_t timestamp = 0;    // seconds since the epoch: from the error file, else when ctrun saw the exit
  std::int64_t observed_ns = 0;  // monotonic time of the exit, to order failures finer than seconds
};

// Builds the failure record of an exited worker, reading its error file if it wrote one.
WorkerFailure make_failure(int local_rank, int global_rank, pid_t pid, int exitcode, const std::string& error_file,
                           std::int64_t now_seconds, std::int64_t observed_ns);

// Index of the root cause: the earliest failure (error-file timestamp, then order of observation).
std::size_t root_cause_index(const std::vector<WorkerFailure>& failures);

// The summary text (starts with "\n", no trailing newline), failures in rank order as torchrun lists them.
std::string format_failure_summary(const std::string& title, const std::vector<WorkerFailure>& failures,
                                   const std::string& host);

}  // namespace ctrun::agent
