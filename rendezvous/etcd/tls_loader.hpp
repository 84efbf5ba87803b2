#pragma once
// Opens ctrun's TLS module (tls_module.hpp) the first time a client needs https, from the directory it is
// installed to beside ctrun's binary (<prefix>/lib/ctrun/ or <prefix>/<libdir>/ctrun/; the build tree has the
// same layout). Thread-safe; the module stays loaded.

#include "rendezvous/etcd/tls_module.hpp"

namespace ctrun::rdzv::etcd {

// Throws store::StoreError saying where it looked and what to do when the module cannot be opened.
const TlsModule& tls_module();

}  // namespace ctrun::rdzv::etcd
