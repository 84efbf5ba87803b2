#pragma once
// What ctrun and its TLS module (libctrun_etcd_tls.so, built from tls_module.cpp) agree on. The module holds
// everything that needs OpenSSL, so that only a job whose etcd endpoint is https maps libssl and libcrypto
// (about 3 ms of CPU at every start otherwise); tls_loader.cpp opens it on first use. Both sides are built from
// one tree with one compiler: C++ types cross the boundary, and kTlsModuleAbi changes whenever they do.

#include <atomic>
#include <cstdint>
#include <memory>

#include "rendezvous/etcd/etcd_options.hpp"
#include "rendezvous/etcd/http_session.hpp"

namespace ctrun::rdzv::etcd {

inline constexpr int kTlsModuleAbi = 1;

struct TlsModule {
  int abi;
  // Loads the CA (or the system's), the client certificate and key of `options`; store::StoreError naming a file
  // that cannot be loaded.
  std::shared_ptr<void> (*make_context)(const Options& options);
  // Connects to `endpoint` (named `host` in messages) and shakes hands by `deadline`, trusting `context` (from
  // make_context): TransientError when the member cannot be reached, store::StoreError when TLS refuses its
  // certificate.
  std::unique_ptr<Session> (*connect)(const Endpoint& endpoint, const std::string& host, void* context,
                                      store::Clock::time_point deadline, std::atomic<std::uint64_t>* wire_bytes);
};

}  // namespace ctrun::rdzv::etcd

// The module's one exported symbol.
extern "C" const ctrun::rdzv::etcd::TlsModule* ctrun_etcd_tls_module();
