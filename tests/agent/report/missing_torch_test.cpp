// The hint after a failure summary when workers lacked torch (agent/report/missing_torch.hpp): the evidence table, the
// wording, the candidates and the bounded probe (fake pythons: shell scripts that answer yes, no, or never).
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

#include "agent/report/missing_torch.hpp"
#include "tests/agent/env_of.hpp"

namespace ctrun::agent {
namespace {

namespace fs = std::filesystem;

WorkerFailure failure(int exitcode) {
  WorkerFailure f;
  f.exitcode = exitcode;
  return f;
}

using test::env_of;

TEST(MissingTorch, Evidence) {
  const std::string no_torch = "Traceback ...\nModuleNotFoundError: No module named 'torch'\n";
  EXPECT_TRUE(says_no_torch(no_torch));
  EXPECT_FALSE(says_no_torch("ModuleNotFoundError: No module named 'torchvision'"));
  EXPECT_EQ(missing_torch_evidence({failure(1)}, {""}), TorchEvidence::kUncaptured);
  EXPECT_EQ(missing_torch_evidence({failure(1), failure(1)}, {"", no_torch}), TorchEvidence::kSeen);
  EXPECT_EQ(missing_torch_evidence({failure(1)}, {"ValueError: bad\n"}), TorchEvidence::kNone);
  EXPECT_EQ(missing_torch_evidence({failure(1), failure(1)}, {"", "KeyError: 'x'\n"}), TorchEvidence::kNone);
  EXPECT_EQ(missing_torch_evidence({failure(-9)}, {""}), TorchEvidence::kNone);  // killed: not an exception
  EXPECT_EQ(missing_torch_evidence({failure(2)}, {no_torch}), TorchEvidence::kSeen);
  EXPECT_EQ(missing_torch_evidence({}, {}), TorchEvidence::kNone);
}

TEST(MissingTorch, Wording) {
  const std::vector<PythonProbe> usual = {{"/p/python3", false}, {"/usr/bin/python3", true}, {"/v/python3", true}};
  auto seen = format_missing_torch_hint(TorchEvidence::kSeen, "/p/python3", "python3 on PATH", usual);
  ASSERT_TRUE(seen);
  EXPECT_EQ(*seen,
            "workers died of \"No module named 'torch'\": they ran /p/python3 (python3 on PATH), which has no torch. "
            "/usr/bin/python3 has torch: run ctrun with PYTHON_EXEC=/usr/bin/python3, or `pip install .` ctrun into "
            "the environment that has torch, whose ctrun then starts workers with its own python (docs/cli.md); "
            "torch is also in /v/python3");
  auto guessed = format_missing_torch_hint(TorchEvidence::kUncaptured, "/p/python3", "python3 on PATH", usual);
  ASSERT_TRUE(guessed);
  EXPECT_NE(guessed->find("workers exited with code 1 and their output went to the console; they ran /p/python3 "
                          "(python3 on PATH), which has no torch. /usr/bin/python3 has torch"),
            std::string::npos)
      << *guessed;
  // Unseen, no guess unless the workers' python surely lacks torch and another has it.
  EXPECT_FALSE(format_missing_torch_hint(TorchEvidence::kUncaptured, "/p/python3", "python3 on PATH",
                                         {{"/p/python3", true}, {"/usr/bin/python3", true}}));
  EXPECT_FALSE(format_missing_torch_hint(TorchEvidence::kUncaptured, "/p/python3", "python3 on PATH",
                                         {{"/p/python3", std::nullopt}, {"/usr/bin/python3", true}}));
  EXPECT_FALSE(format_missing_torch_hint(TorchEvidence::kUncaptured, "/p/python3", "python3 on PATH",
                                         {{"/p/python3", false}, {"/usr/bin/python3", false}}));
  EXPECT_FALSE(format_missing_torch_hint(TorchEvidence::kNone, "/p/python3", "python3 on PATH", usual));
  // Seen, and no python has it (one did not answer: not listed as lacking it).
  auto none = format_missing_torch_hint(TorchEvidence::kSeen, "/p/python3", "python3 on PATH",
                                        {{"/p/python3", false}, {"/usr/bin/python3", false}, {"/x", std::nullopt}});
  ASSERT_TRUE(none);
  EXPECT_NE(none->find("No other python found here has torch (/usr/bin/python3): install torch for /p/python3, or "
                       "set PYTHON_EXEC to a python that has it"),
            std::string::npos)
      << *none;
}

class FakePythons : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("ctrun_missing_torch_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_ / "bin");
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string script(const std::string& name, const std::string& body) {
    const fs::path p = dir_ / "bin" / name;
    std::ofstream(p) << "#!/bin/sh\n" << body << "\n";
    ::chmod(p.c_str(), 0755);
    return p.string();
  }
  fs::path dir_;
};

TEST_F(FakePythons, ProbeIsBoundedAndAnswersEach) {
  const std::string yes = script("yes", "exit 0"), no = script("no", "exit 1"), hang = script("hang", "exec sleep 30");
  const auto start = std::chrono::steady_clock::now();
  auto probes = probe_torch({yes, no, hang, (dir_ / "missing").string()}, std::chrono::milliseconds(3000));
  const auto took = std::chrono::steady_clock::now() - start;
  EXPECT_LT(took, std::chrono::seconds(10));  // not the 30 s of the hung probe (a margin for a loaded machine)
  ASSERT_EQ(probes.size(), 4u);
  EXPECT_EQ(probes[0].has_torch, true);
  EXPECT_EQ(probes[1].has_torch, false);
  EXPECT_EQ(probes[2].has_torch, std::nullopt);  // killed at the budget
  EXPECT_EQ(probes[3].has_torch, std::nullopt);  // could not be run
}

TEST_F(FakePythons, CandidatesOncePathsNotTargets) {
  const std::string py = script("python3", "exit 0");
  const auto venv = dir_ / "venv";
  fs::create_directories(venv / "bin");
  fs::create_symlink(py, venv / "bin" / "python3");  // a venv's python links elsewhere: still its own candidate
  auto c = python_candidates(py, env_of({{"PATH", (dir_ / "bin").string()}, {"VIRTUAL_ENV", venv.string()}}));
  std::vector<std::string> expected = {py};
  if (::access("/usr/bin/python3", X_OK) == 0) expected.push_back("/usr/bin/python3");
  expected.push_back((venv / "bin" / "python3").string());
  EXPECT_EQ(c, expected);
  // A workers' python that does not exist is left out.
  EXPECT_EQ(python_candidates((dir_ / "nope").string(), env_of({{"PATH", "/nonexistent"}})).size(),
            ::access("/usr/bin/python3", X_OK) == 0 ? 1u : 0u);
}

}  // namespace
}  // namespace ctrun::agent
