#pragma once
// Files and text for tests: a whole file as a string, a fresh temporary folder, counting a text's occurrences.

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

namespace ctrun::test {

// The whole file (bytes as they are); "" when it cannot be read, e.g. not written yet.
inline std::string read_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// An empty folder $TMPDIR/ctrun_test_NAME_PID, emptied if a previous run left it.
inline std::string fresh_dir(const std::string& name) {
  const std::string dir =
      std::filesystem::temp_directory_path().string() + "/ctrun_test_" + name + "_" + std::to_string(::getpid());
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

// How many times `what` occurs in text (overlaps counted), e.g. an event in an event log.
inline std::size_t count_of(const std::string& text, const std::string& what) {
  std::size_t n = 0;
  for (auto pos = text.find(what); pos != std::string::npos; pos = text.find(what, pos + 1)) ++n;
  return n;
}

}  // namespace ctrun::test
