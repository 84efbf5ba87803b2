#pragma once
// Reads one worker stream (a pipe) as data arrives and routes whole lines: raw to the rank's log file,
// prefixed to ctrun's console, and to the attempt's filtered_std*.log when a duplicate filter matches.
// All streams are read on the agent's one event loop, so console lines of different ranks never interleave.

#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace boost::asio {
class io_context;
}

namespace ctrun::agent {

class ConsoleSink;

struct TeeTarget {
  int console_fd = -1;             // 1 or 2; -1: not shown on the console
  ConsoleSink* console = nullptr;  // queues console lines off the loop; null: written directly (blocking)
  int file_fd = -1;                // owned: closed at end of stream; -1: no file
  std::string file_path;           // for the one warning when the file cannot be written (disk full)
  int filtered_fd = -1;            // shared by the ranks of an attempt, not owned
  std::vector<std::string> filters;
  std::string prefix;
  bool keep_last_line = false;  // remember the last non-blank line (a worker's stderr: ctrun quotes it)
};

class TeeStream {
 public:
  // Takes ownership of read_fd. on_eof runs on the loop once the stream ended and everything was written.
  TeeStream(boost::asio::io_context& io, int read_fd, TeeTarget target, std::function<void()> on_eof);
  ~TeeStream();
  TeeStream(const TeeStream&) = delete;
  TeeStream& operator=(const TeeStream&) = delete;

  void start();
  bool finished() const;
  // With keep_last_line: the last non-blank line read so far, without its newline (at most 400 bytes of it).
  const std::string& last_line() const;

 private:
  class Impl;
  std::shared_ptr<Impl> impl_;
};

}  // namespace ctrun::agent
