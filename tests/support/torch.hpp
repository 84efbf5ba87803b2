#pragma once
// Real PyTorch in tests: the python configured with torch 1.13 (CTRUN_TORCH_PYTHON), and the skip a test takes, with
// the reason, when that python cannot import torch.distributed.

#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <string>

#include "tests/support/child_process.hpp"

namespace ctrun::test {

inline const std::string kTorchPython = CTRUN_TORCH_PYTHON;

// Why torch cannot be used here, or "" when it can (asked once per test binary, bounded to 180 s).
inline const std::string& torch_unavailable_reason() {
  static const std::string reason = [] {
    if (kTorchPython.empty() || ::access(kTorchPython.c_str(), X_OK) != 0)
      return std::string("no python3 found at configure time (CTRUN_TORCH_PYTHON='" + kTorchPython + "')");
    ChildProcess p({kTorchPython, "-c", "import torch.distributed as d; print('torch', d.is_available())"});
    // torch's import takes seconds here and minutes on a machine running several suites at once.
    auto rc = p.wait_exit(std::chrono::seconds(180));
    if (!rc)
      return kTorchPython + " did not import torch within 180 s (an overloaded machine?): " + p.output().substr(0, 300);
    if (*rc != 0)
      return kTorchPython + " cannot import torch (install Debian's python3-torch): " + p.output().substr(0, 300);
    return std::string();
  }();
  return reason;
}

// GTEST_SKIP()s the calling test (it returns from the test body) when real PyTorch is unavailable.
#define CTRUN_REQUIRE_TORCH()                                                                    \
  do {                                                                                           \
    if (!::ctrun::test::torch_unavailable_reason().empty())                                      \
      GTEST_SKIP() << "real PyTorch unavailable: " << ::ctrun::test::torch_unavailable_reason(); \
  } while (0)

}  // namespace ctrun::test
