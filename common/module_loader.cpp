#include "common/module_loader.hpp"

#include <dlfcn.h>

#include <filesystem>
#include <stdexcept>
#include <vector>

namespace ctrun::modules {
namespace {

// Where a module may be, relative to the prefix above the running binary's directory (CMake passes both).
std::vector<std::filesystem::path> candidates(const std::string& file) {
  std::error_code ec;
  const auto prefix = std::filesystem::read_symlink("/proc/self/exe", ec).parent_path().parent_path();
  std::vector<std::filesystem::path> out;
  for (const char* dir : {CTRUN_MODULE_BUILD_DIR, CTRUN_MODULE_INSTALL_DIR}) {
    auto path = prefix / dir / file;
    if (out.empty() || out.back() != path) out.push_back(std::move(path));
  }
  return out;
}

}  // namespace

const void* open_module(const std::string& file, const char* entry, bool (*accept)(const void*),
                        const std::string& what_for) {
  std::string tried;
  for (const auto& path : candidates(file)) {
    if (void* handle = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL)) {
      auto get = reinterpret_cast<const void* (*)()>(::dlsym(handle, entry));
      const void* module = get ? get() : nullptr;
      if (module && accept(module)) return module;
      tried += "\n  " + path.string() + ": not this version of ctrun's module";
      ::dlclose(handle);
      continue;
    }
    const char* why = ::dlerror();  // names the path
    tried += "\n  " + (why ? std::string(why) : path.string() + ": cannot be opened");
  }
  throw std::runtime_error(what_for + " Looked for:" + tried);
}

}  // namespace ctrun::modules
