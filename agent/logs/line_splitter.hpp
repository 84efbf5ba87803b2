#pragma once
// Cuts a byte stream into whole lines, so that tee'd output of many ranks never interleaves mid-line.
// A line longer than max_line is cut (with a newline added) so a worker that never ends a line cannot
// grow ctrun's memory without bound.

#include <cstddef>
#include <string>
#include <string_view>

namespace ctrun::agent {

class LineSplitter {
 public:
  explicit LineSplitter(std::size_t max_line = 1 << 16) : max_line_(max_line) {}

  // Calls on_line(line) for every complete line in data (each ends with '\n').
  template <typename OnLine>
  void feed(std::string_view data, OnLine&& on_line) {
    while (!data.empty()) {
      std::size_t nl = data.find('\n');
      if (nl == std::string_view::npos) {
        partial_.append(data);
        if (partial_.size() >= max_line_) flush(on_line);
        return;
      }
      if (partial_.empty()) {
        on_line(data.substr(0, nl + 1));
      } else {
        partial_.append(data.substr(0, nl + 1));
        on_line(std::string_view(partial_));
        partial_.clear();
      }
      data.remove_prefix(nl + 1);
    }
  }

  // End of stream: a last line without '\n' is delivered with one added.
  template <typename OnLine>
  void flush(OnLine&& on_line) {
    if (partial_.empty()) return;
    partial_ += '\n';
    on_line(std::string_view(partial_));
    partial_.clear();
  }

 private:
  std::size_t max_line_;
  std::string partial_;
};

// The tee prefix: "[<role><local_rank>]:" or TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE with ${role_name},
// ${local_rank}, ${rank} and ${hostname} substituted (Python string.Template, as torchrun).
std::string log_line_prefix(const std::string* tmpl, const std::string& role, int local_rank, int rank,
                            const std::string& hostname);

}  // namespace ctrun::agent
