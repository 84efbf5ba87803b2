// Which python runs the workers (agent/launch/worker_python.hpp): PYTHON_EXEC, else the environment ctrun lives in,
// else python3 on PATH. Environments are made in temporary directories.
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>

#include <gtest/gtest.h>

#include "agent/launch/worker_python.hpp"
#include "tests/agent/env_of.hpp"

namespace ctrun::agent {
namespace {

namespace fs = std::filesystem;

using test::env_of;

void touch(const fs::path& p, bool executable) {
  fs::create_directories(p.parent_path());
  std::ofstream(p) << "#!/bin/sh\n";
  ::chmod(p.c_str(), executable ? 0755 : 0644);
}

// <root>/<name>/bin/ctrun, with `marker` (pyvenv.cfg, conda-meta/ or nothing) and the named pythons in bin/.
fs::path make_prefix(const std::string& name, const std::string& marker, std::vector<std::string> pythons,
                     bool executable = true) {
  const fs::path prefix = fs::temp_directory_path() / ("ctrun_worker_python_" + std::to_string(::getpid())) / name;
  fs::remove_all(prefix);
  touch(prefix / "bin" / "ctrun", true);
  if (marker == "pyvenv.cfg") touch(prefix / marker, false);
  if (marker == "conda-meta") fs::create_directories(prefix / marker);
  for (const auto& p : pythons) touch(prefix / "bin" / p, executable);
  return prefix;
}

class WorkerPythonDirs : public ::testing::Test {
 protected:
  void TearDown() override {
    fs::remove_all(fs::temp_directory_path() / ("ctrun_worker_python_" + std::to_string(::getpid())));
  }
};

TEST_F(WorkerPythonDirs, PythonExecWinsEverywhere) {
  const fs::path venv = make_prefix("venv", "pyvenv.cfg", {"python3"});
  auto p = choose_worker_python(env_of({{"PYTHON_EXEC", "/opt/py"}}), venv / "bin" / "ctrun");
  EXPECT_EQ(p.program, "/opt/py");
  EXPECT_EQ(p.source, "PYTHON_EXEC");
  EXPECT_TRUE(p.from_python_exec);
  // Set but empty counts as unset (as before).
  EXPECT_EQ(choose_worker_python(env_of({{"PYTHON_EXEC", ""}}), "/usr/bin/ctrun").program, "python3");
}

TEST_F(WorkerPythonDirs, VirtualEnvironmentOfCtrun) {
  const fs::path venv = make_prefix("venv", "pyvenv.cfg", {"python", "python3"});
  auto p = choose_worker_python(env_of({}), venv / "bin" / "ctrun");
  EXPECT_EQ(p.program, (venv / "bin" / "python3").string());  // the venv's path, not the interpreter it links to
  EXPECT_EQ(p.source, "the virtual environment " + venv.string() + " of ctrun");
  EXPECT_FALSE(p.from_python_exec);
}

TEST_F(WorkerPythonDirs, CondaEnvironmentWithOnlyPython) {
  const fs::path conda = make_prefix("conda", "conda-meta", {"python"});
  auto p = choose_worker_python(env_of({}), conda / "bin" / "ctrun");
  EXPECT_EQ(p.program, (conda / "bin" / "python").string());
  EXPECT_EQ(p.source, "the conda environment " + conda.string() + " of ctrun");
}

TEST_F(WorkerPythonDirs, PathPythonOtherwise) {
  // A prefix that is no environment (/usr, /usr/local, a build tree) even with a python beside ctrun.
  const fs::path plain = make_prefix("plain", "", {"python3"});
  EXPECT_EQ(choose_worker_python(env_of({}), plain / "bin" / "ctrun").program, "python3");
  EXPECT_EQ(choose_worker_python(env_of({}), plain / "bin" / "ctrun").source, "python3 on PATH");
  // An environment without an executable python.
  const fs::path broken = make_prefix("broken", "pyvenv.cfg", {"python3"}, false);
  EXPECT_EQ(choose_worker_python(env_of({}), broken / "bin" / "ctrun").program, "python3");
  const fs::path empty = make_prefix("empty", "conda-meta", {});
  EXPECT_EQ(choose_worker_python(env_of({}), empty / "bin" / "ctrun").program, "python3");
  // Unknown location of ctrun.
  EXPECT_EQ(choose_worker_python(env_of({}), fs::path()).program, "python3");
}

TEST(WorkerPython, RunningBinaryOfTheBuildTree) {
  EXPECT_EQ(worker_python(env_of({})).program, "python3");  // build/ has no pyvenv.cfg
}

}  // namespace
}  // namespace ctrun::agent
