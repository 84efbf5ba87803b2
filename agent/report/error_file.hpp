#pragma once
// TORCHELASTIC_ERROR_FILE: the JSON a worker decorated with torch's @record writes when it raises
// ({"message": {"message": "...", "extraInfo": {"py_callstack": "...", "timestamp": "..."}}}, or the older
// {"message": "...", "timestamp": N}), and the file ctrun itself writes for its parent.

#include <cstdint>
#include <optional>
#include <string>

namespace ctrun::agent {

struct WorkerErrorData {
  std::string traceback;                  // py_callstack, else message
  std::optional<std::int64_t> timestamp;  // seconds since the epoch
};

// nullopt when the file does not exist or is not an error file.
std::optional<WorkerErrorData> read_worker_error_file(const std::string& path);

// What torchrun's @record main does on ChildFailedError: copy the root cause's error file, adding
// "errorCode": <exitcode> to its message. Without one, ctrun records its own summary. Best effort.
void write_agent_error_file(const std::string& path, const std::string& root_error_file, int root_exitcode,
                            const std::string& summary);

// The error file of a worker ctrun treats as failed itself (a hang, docs/hang.md), in the @record format so that
// the failure summary shows it: `message` and the worker's stack as its py_callstack. Best effort.
void write_hang_error_file(const std::string& path, const std::string& message, const std::string& stack);

}  // namespace ctrun::agent
