#pragma once
// This machine's name, looked up one way for every component: gethostname(2), its first label, and the
// canonical name Python's socket.getfqdn() gives (what torchrun prints and uses as a node's identity).

#include <string>

namespace ctrun::host {

// gethostname(2); "" when it fails.
std::string name();

// The name up to its first '.' ("node1" of "node1.cluster"), as torchrun's log line prefix uses it.
std::string short_name();

// The canonical name (getaddrinfo AI_CANONNAME) when it has a domain, else the host name; "localhost" when even
// gethostname fails.
std::string fqdn();

}  // namespace ctrun::host
