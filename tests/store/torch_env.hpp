#pragma once
// Real-PyTorch test environment: the python with torch 1.13 (CTRUN_TORCH_PYTHON), our helper scripts, and
// the servers these tests start as child processes (ctstore, torch's own TCPStore).

#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <optional>
#include <regex>
#include <string>

#include "tests/store/child_process.hpp"

namespace ctrun::test {

inline const std::string kPython = CTRUN_TORCH_PYTHON;
inline const std::string kTorchScripts = std::string(CTRUN_SOURCE_DIR) + "/tests/store/torch/";
inline const std::string kCtstore = std::string(CTRUN_BIN_DIR) + "/ctstore";

// Why torch cannot be used here, or "" when it can (checked once per test binary).
inline const std::string& torch_unavailable_reason() {
  static const std::string reason = [] {
    if (kPython.empty() || ::access(kPython.c_str(), X_OK) != 0)
      return std::string("no python3 found at configure time (CTRUN_TORCH_PYTHON='" + kPython + "')");
    ChildProcess p({kPython, "-c", "import torch.distributed as d; print('torch', d.is_available())"});
    auto rc = p.wait_exit(std::chrono::seconds(60));
    if (!rc || *rc != 0)
      return kPython + " cannot import torch (install Debian's python3-torch): " + p.output().substr(0, 300);
    return std::string();
  }();
  return reason;
}

#define CTRUN_REQUIRE_TORCH()                                                                    \
  do {                                                                                           \
    if (!::ctrun::test::torch_unavailable_reason().empty())                                      \
      GTEST_SKIP() << "real PyTorch unavailable: " << ::ctrun::test::torch_unavailable_reason(); \
  } while (0)

// A server child process and the port it reported.
struct ServedProcess {
  std::unique_ptr<ChildProcess> process;
  std::uint16_t port = 0;
};

// torch's own TCPStore server (tests/store/torch/torch_server.py), ephemeral port.
inline ServedProcess start_torch_server() {
  ServedProcess s;
  s.process = std::make_unique<ChildProcess>(std::vector<std::string>{kPython, kTorchScripts + "torch_server.py"});
  auto port = s.process->wait_for_line(std::regex(R"(^ready (\d+))"), std::chrono::seconds(60));
  if (!port) throw std::runtime_error("torch_server.py did not become ready: " + s.process->output());
  s.port = static_cast<std::uint16_t>(std::stoi(*port));
  return s;
}

// build/bin/ctstore on 127.0.0.1, ephemeral port (its log line names the port it listens on).
inline ServedProcess start_ctstore(std::vector<std::string> extra_args = {}) {
  ServedProcess s;
  std::vector<std::string> argv{kCtstore, "--host", "127.0.0.1", "--port", "0"};
  argv.insert(argv.end(), extra_args.begin(), extra_args.end());
  s.process = std::make_unique<ChildProcess>(argv);
  auto port = s.process->wait_for_line(std::regex(R"(listening\D*?(?:[\d.]+|\[[0-9a-fA-F:]+\]|[\w.-]+):(\d+))"),
                                       std::chrono::seconds(20));
  if (!port) throw std::runtime_error("ctstore did not report a listening port: " + s.process->output());
  s.port = static_cast<std::uint16_t>(std::stoi(*port));
  return s;
}

}  // namespace ctrun::test
