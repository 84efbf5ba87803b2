#include "agent/report/failure.hpp"

#include <algorithm>
#include <ctime>
#include <sstream>

#include "agent/base/signal_names.hpp"
#include "agent/report/error_file.hpp"

namespace ctrun::agent {
namespace {

std::string replace_all(std::string s, const std::string& from, const std::string& to) {
  for (size_t pos = s.find(from); pos != std::string::npos; pos = s.find(from, pos + to.size())) {
    s.replace(pos, from.size(), to);
  }
  return s;
}

// datetime.fromtimestamp(ts).isoformat(sep="_"): local time.
std::string iso_time(std::int64_t ts) {
  std::time_t t = static_cast<std::time_t>(ts);
  std::tm tm{};
  ::localtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%d_%H:%M:%S", &tm);
  return buf;
}

std::string format_one(std::size_t idx, const WorkerFailure& f, const std::string& host) {
  std::ostringstream s;
  s << "[" << idx << "]:\n"
    << "  time      : " << iso_time(f.timestamp) << "\n"
    << "  host      : " << host << "\n"
    << "  rank      : " << f.global_rank << " (local_rank: " << f.local_rank << ")\n"
    << "  exitcode  : " << f.exitcode << " (pid: " << f.pid << ")";
  if (f.exitcode < 0) s << " (" << signal_name(-f.exitcode) << ")";
  s << "\n"
    << "  error_file: " << f.error_file << "\n"
    << "  traceback : " << f.message;
  return s.str();
}

std::size_t widest_line(const std::string& text) {
  std::size_t width = 0;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) width = std::max(width, line.size());
  return width;
}

}  // namespace

WorkerFailure make_failure(int local_rank, int global_rank, pid_t pid, int exitcode, const std::string& error_file,
                           std::int64_t now_seconds, std::int64_t observed_ns) {
  WorkerFailure f;
  f.local_rank = local_rank;
  f.global_rank = global_rank;
  f.pid = pid;
  f.exitcode = exitcode;
  f.observed_ns = observed_ns;
  f.timestamp = now_seconds;
  f.error_file = "<N/A>";
  if (auto data = read_worker_error_file(error_file)) {
    f.error_file = error_file;
    // torchrun indents the traceback's continuation lines by two spaces.
    f.message = replace_all(data->traceback, "\n", "\n  ");
    if (data->timestamp) f.timestamp = *data->timestamp;
  }
  if (f.message.empty()) {
    if (exitcode < 0) {
      f.message = "Signal " + std::to_string(-exitcode) + " (" + signal_name(-exitcode) + ") received by PID " +
                  std::to_string(pid);
    } else {
      f.message = "To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html";
    }
  }
  return f;
}

std::size_t root_cause_index(const std::vector<WorkerFailure>& failures) {
  std::size_t best = 0;
  for (std::size_t i = 1; i < failures.size(); ++i) {
    const auto& a = failures[i];
    const auto& b = failures[best];
    if (a.timestamp < b.timestamp || (a.timestamp == b.timestamp && a.observed_ns < b.observed_ns)) best = i;
  }
  return best;
}

std::string format_failure_summary(const std::string& title_name, const std::vector<WorkerFailure>& failures,
                                   const std::string& host) {
  std::string title = title_name + " FAILED";
  std::size_t root = root_cause_index(failures);
  std::size_t width = title.size();
  std::string root_fmt;
  std::vector<std::string> others;
  for (std::size_t i = 0; i < failures.size(); ++i) {
    std::string fmt = format_one(i, failures[i], host);
    width = std::max(width, widest_line(fmt));
    if (i == root) {
      root_fmt = fmt;
    } else {
      others.push_back(fmt);
    }
  }
  width = std::min<std::size_t>(width, 60);
  std::string border(width, '='), section(width, '-');
  std::ostringstream s;
  s << "\n" << border << "\n" << title << "\n" << section << "\nFailures:\n";
  if (others.empty()) {
    s << "  <NO_OTHER_FAILURES>";
  } else {
    for (std::size_t i = 0; i < others.size(); ++i) s << (i ? "\n" : "") << others[i];
  }
  s << "\n" << section << "\nRoot Cause (first observed failure):\n" << root_fmt << "\n" << border;
  return s.str();
}

}  // namespace ctrun::agent
