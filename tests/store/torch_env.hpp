#pragma once
// The store's real-PyTorch tests: their helper scripts and torch's own TCPStore server as a child process (ctstore
// and the torch check are tests/support's).

#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <optional>
#include <regex>
#include <string>

#include "tests/support/ctstore.hpp"
#include "tests/support/torch.hpp"

namespace ctrun::test {

inline const std::string kTorchScripts = std::string(CTRUN_SOURCE_DIR) + "/tests/store/torch/";

// torch's own TCPStore server (tests/store/torch/torch_server.py), ephemeral port.
inline ServedProcess start_torch_server() {
  ServedProcess s;
  s.process = std::make_unique<ChildProcess>(std::vector<std::string>{kTorchPython, kTorchScripts + "torch_server.py"});
  auto port = s.process->wait_for_line(std::regex(R"(^ready (\d+))"), std::chrono::seconds(60));
  if (!port) throw std::runtime_error("torch_server.py did not become ready: " + s.process->output());
  s.port = static_cast<std::uint16_t>(std::stoi(*port));
  return s;
}

}  // namespace ctrun::test
