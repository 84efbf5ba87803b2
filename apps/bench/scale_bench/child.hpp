#pragma once
// A child process of scale_bench (an agent group, or the ctstore daemon) with pipes on its stdin and stdout:
// the bench writes commands and reads one line at a time. Killed (SIGKILL, by pid) and reaped when destroyed.

#include <sys/types.h>

#include <cstdint>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

namespace ctrun::scale_bench {

// The start of a child's own main (--agent-group, --storm-group): every descriptor the hard limit allows (it holds
// thousands of connections), and warnings only in the log.
void begin_child_process();

// CPU seconds (user + system) the threads of process `pid` have used so far (/proc/<pid>/task/*/schedstat).
double cpu_seconds_of(pid_t pid);

class Child {
 public:
  explicit Child(const std::vector<std::string>& argv);
  ~Child();
  Child(const Child&) = delete;
  Child& operator=(const Child&) = delete;

  pid_t pid() const { return pid_; }
  // The next line of the child's stdout without its newline; throws if the child closed stdout first.
  std::string read_line();
  void write_line(const std::string& line);
  // Waits (at most timeout_s) for a clean exit; returns the exit status, or -1 if it was killed.
  int finish(double timeout_s);
  // The start of a child's own main (--agent-group, --storm-group): every descriptor the hard limit allows (it holds
  // thousands of connections), and warnings only in the log.
  void begin_child_process();

  // CPU seconds (user + system) its threads have used so far, from /proc/<pid>/task/*/schedstat (ns).
  double cpu_seconds() const;
  // User and system CPU seconds from /proc/<pid>/stat (clock ticks: 10 ms resolution, sampled).
  std::pair<double, double> user_system_seconds() const;

 private:
  pid_t pid_ = -1;
  int to_child_ = -1;
  std::FILE* from_child_ = nullptr;
  std::string what_;
};

}  // namespace ctrun::scale_bench
