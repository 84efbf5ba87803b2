#include "rendezvous/etcd/tls_loader.hpp"

#include <dlfcn.h>

#include <filesystem>
#include <string>
#include <vector>

namespace ctrun::rdzv::etcd {
namespace {

constexpr const char* kModuleFile = "libctrun_etcd_tls.so";

// Where the module may be, relative to the prefix above the running binary's directory (CMake passes both).
std::vector<std::filesystem::path> candidates() {
  std::error_code ec;
  const auto prefix = std::filesystem::read_symlink("/proc/self/exe", ec).parent_path().parent_path();
  std::vector<std::filesystem::path> out;
  for (const char* dir : {CTRUN_TLS_MODULE_BUILD_DIR, CTRUN_TLS_MODULE_INSTALL_DIR}) {
    auto path = prefix / dir / kModuleFile;
    if (out.empty() || out.back() != path) out.push_back(std::move(path));
  }
  return out;
}

const TlsModule* open_module() {
  std::string tried;
  for (const auto& path : candidates()) {
    // RTLD_LOCAL: OpenSSL's symbols stay the module's own.
    if (void* handle = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL)) {
      auto entry = reinterpret_cast<const TlsModule* (*)()>(::dlsym(handle, "ctrun_etcd_tls_module"));
      const TlsModule* module = entry ? entry() : nullptr;
      if (module && module->abi == kTlsModuleAbi) return module;
      tried += "\n  " + path.string() + ": not this version of ctrun's TLS module";
      ::dlclose(handle);
      continue;
    }
    const char* why = ::dlerror();  // names the path
    tried += "\n  " + (why ? std::string(why) : path.string() + ": cannot be opened");
  }
  throw store::StoreError("etcd over https needs ctrun's TLS module (" + std::string(kModuleFile) +
                          "), installed with ctrun; reinstall ctrun, or use protocol=http. Looked for:" + tried);
}

}  // namespace

const TlsModule& tls_module() {
  static const TlsModule* module = open_module();  // a failed open throws and is tried again next time
  return *module;
}

}  // namespace ctrun::rdzv::etcd
