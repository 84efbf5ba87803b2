#include "agent/launch/worker_python.hpp"

#include <unistd.h>

namespace ctrun::agent {

WorkerPython choose_worker_python(const EnvLookup& env, const std::filesystem::path& ctrun_exe) {
  namespace fs = std::filesystem;
  if (auto exec = env("PYTHON_EXEC"); exec && !exec->empty()) return {*exec, "PYTHON_EXEC", true};
  if (!ctrun_exe.empty()) {
    const fs::path bin = ctrun_exe.parent_path();
    const fs::path prefix = bin.parent_path();
    std::error_code ec;
    const char* kind = fs::exists(prefix / "pyvenv.cfg", ec)         ? "virtual"
                       : fs::is_directory(prefix / "conda-meta", ec) ? "conda"
                                                                     : nullptr;
    if (kind != nullptr) {
      // Not resolved: a venv's python is a link to the base interpreter, and it is the venv through that path.
      for (const char* name : {"python3", "python"}) {
        const fs::path python = bin / name;
        if (::access(python.c_str(), X_OK) == 0) {
          return {python.string(), std::string("the ") + kind + " environment " + prefix.string() + " of ctrun", false};
        }
      }
    }
  }
  return {"python3", "python3 on PATH", false};
}

WorkerPython worker_python(const EnvLookup& env) {
  std::error_code ec;
  const auto exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  return choose_worker_python(env, ec ? std::filesystem::path() : exe);
}

std::string describe(const WorkerPython& python) { return python.program + " (" + python.source + ")"; }

}  // namespace ctrun::agent
