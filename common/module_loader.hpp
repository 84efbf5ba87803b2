#pragma once
// Opens one of ctrun's own modules (shared objects built with it and installed beside it: <prefix>/lib/ctrun/ in the
// build tree, <prefix>/<libdir>/ctrun/ once installed) and returns what its one exported entry point gives. Modules
// hold what needs a large library (OpenSSL) that most jobs never use: only a job that needs it maps it.

#include <string>

namespace ctrun::modules {

// dlopen's `file` (RTLD_NOW | RTLD_LOCAL: its libraries' symbols stay its own) from the candidate directories in
// turn, calls `entry` (a function taking nothing and returning a pointer) and returns the pointer when `accept` takes
// it. Throws std::runtime_error starting with `what_for` and listing every place tried and why it failed.
const void* open_module(const std::string& file, const char* entry, bool (*accept)(const void*),
                        const std::string& what_for);

}  // namespace ctrun::modules
