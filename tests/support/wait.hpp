#pragma once
// Bounded waits for what another thread or process does: a predicate, a text in a file, files in a folder. Each
// returns false once its deadline passed, so a test that waits never hangs.

#include <chrono>
#include <filesystem>
#include <string>
#include <thread>

#include "tests/support/files.hpp"

namespace ctrun::test {

// Polls pred every `poll` until it holds (true) or `limit` passed (false, after one last look).
template <typename Pred>
bool eventually(Pred pred, std::chrono::milliseconds limit = std::chrono::seconds(5),
                std::chrono::milliseconds poll = std::chrono::milliseconds(10)) {
  const auto end = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < end) {
    if (pred()) return true;
    std::this_thread::sleep_for(poll);
  }
  return pred();
}

// Waits until the file at path contains text (a log or event-log line a process writes).
inline bool wait_for_text(const std::string& path, const std::string& text, std::chrono::milliseconds deadline) {
  return eventually([&] { return read_file(path).find(text) != std::string::npos; }, deadline,
                    std::chrono::milliseconds(20));
}

// Waits until `count` files named prefix* exist in dir (workers that announce themselves with a file each).
inline bool wait_for_files(const std::string& dir, const std::string& prefix, int count,
                           std::chrono::milliseconds deadline) {
  return eventually(
      [&] {
        int n = 0;
        std::error_code ec;
        for (auto it = std::filesystem::directory_iterator(dir, ec); !ec && it != std::filesystem::directory_iterator();
             it.increment(ec)) {
          if (it->path().filename().string().rfind(prefix, 0) == 0) ++n;
        }
        return n >= count;
      },
      deadline);
}

}  // namespace ctrun::test
