#pragma once
// One bounded HTTP GET (Boost.Beast, synchronous for its caller): `ctrun --status` and tests read the agent's live
// view with it.

#include <string>

namespace ctrun::http {

// The body of GET http://host:port/path, or throws std::runtime_error saying what failed (cannot connect, no
// reply within `timeout_ms` in all, a status other than 200 with the body's first line).
std::string get(const std::string& host, int port, const std::string& path, int timeout_ms = 2000);

}  // namespace ctrun::http
