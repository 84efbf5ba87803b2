#include "rendezvous/etcd/tls_loader.hpp"

#include <stdexcept>
#include <string>

#include "common/module_loader.hpp"

namespace ctrun::rdzv::etcd {
namespace {

constexpr const char* kModuleFile = "libctrun_etcd_tls.so";

const TlsModule* open_module() {
  try {
    return static_cast<const TlsModule*>(modules::open_module(
        kModuleFile, "ctrun_etcd_tls_module",
        [](const void* m) { return static_cast<const TlsModule*>(m)->abi == kTlsModuleAbi; },
        "etcd over https needs ctrun's TLS module (" + std::string(kModuleFile) +
            "), installed with ctrun; reinstall ctrun, or use protocol=http."));
  } catch (const std::runtime_error& e) {
    throw store::StoreError(e.what());
  }
}

}  // namespace

const TlsModule& tls_module() {
  static const TlsModule* module = open_module();  // a failed open throws and is tried again next time
  return *module;
}

}  // namespace ctrun::rdzv::etcd
