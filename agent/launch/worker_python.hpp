#pragma once
// Which python runs the workers, decided here only: PYTHON_EXEC when set; else, when ctrun itself
// lives in the bin/ of a virtual or conda environment (`pip install .` there), that environment's python, as
// torchrun runs its workers with its own interpreter; else python3 on PATH. worker_argv()
// (agent/launch/worker_invocation.hpp) and so --preload's warm process and --dry-run take argv[0] from here; the agent
// logs the choice once.

#include <filesystem>
#include <string>

#include "agent/base/command_line.hpp"

namespace ctrun::agent {

struct WorkerPython {
  std::string program;  // the workers' argv[0]: a path, or "python3", looked up on the workers' PATH
  std::string source;   // why: "PYTHON_EXEC", "the virtual environment /v of ctrun", "python3 on PATH"
  bool from_python_exec = false;
};

// ctrun_exe: where the running ctrun is (empty: unknown). An environment is the parent of ctrun's directory when
// it holds pyvenv.cfg (venv, virtualenv) or conda-meta/ (conda), and its bin/python3 (or bin/python) is executable.
WorkerPython choose_worker_python(const EnvLookup& env, const std::filesystem::path& ctrun_exe);

// The same for the running ctrun (/proc/self/exe).
WorkerPython worker_python(const EnvLookup& env);

// "PROGRAM (SOURCE)", as the agent logs it once.
std::string describe(const WorkerPython& python);

}  // namespace ctrun::agent
