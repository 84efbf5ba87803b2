#pragma once
// Threads-as-ranks: run N ranks of a process group as threads of this process over one MemoryStore (gloo's
// test style). Failures in any rank are collected and reported with the rank that raised them.

#include <gtest/gtest.h>

#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "comm/process_group.hpp"
#include "store/memory_store.hpp"

namespace ctrun::comm::testing {

// Runs fn(rank, group) on n threads, each with its own ProcessGroup over a shared store. Returns the
// per-rank error messages (empty string: that rank succeeded). Every rank's group is created inside its thread.
inline std::vector<std::string> run_ranks_collect(int n, const ProcessGroupOptions& options,
                                                  const std::function<void(int, ProcessGroup&)>& fn,
                                                  const std::string& prefix = "test") {
  auto store = std::make_shared<store::MemoryStore>(std::chrono::seconds(30));
  std::vector<std::string> errors(static_cast<std::size_t>(n));
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      try {
        auto pg = ProcessGroup::from_store(store, prefix, r, n, options);
        fn(r, *pg);
      } catch (const std::exception& e) {
        errors[static_cast<std::size_t>(r)] = e.what();
        if (errors[static_cast<std::size_t>(r)].empty()) errors[static_cast<std::size_t>(r)] = "(empty error)";
      }
    });
  }
  for (auto& t : threads) t.join();
  return errors;
}

// Like run_ranks_collect, but fails the current test with each rank's error.
inline void run_ranks(int n, const ProcessGroupOptions& options, const std::function<void(int, ProcessGroup&)>& fn) {
  const auto errors = run_ranks_collect(n, options, fn);
  for (int r = 0; r < n; ++r) {
    EXPECT_EQ(errors[static_cast<std::size_t>(r)], "") << "rank " << r << " of " << n;
  }
}

}  // namespace ctrun::comm::testing
