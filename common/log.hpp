#pragma once
// One spdlog logger per component ("store", "rdzv", "agent", "comm", "ctrun", "ctstore").
// The level comes from CTRUN_LOG_LEVEL, else LOGLEVEL (torchrun's variable), else "warn" for libraries
// used inside workers and "info" for the daemons (they call set_default_level).

#include <memory>
#include <string_view>

#include <spdlog/spdlog.h>

namespace ctrun::log {

// Returns the logger of a component, creating it on first use (thread-safe). Output goes to stderr.
std::shared_ptr<spdlog::logger> get(std::string_view component);

// Level used for loggers that have no level from the environment. Call before the first get().
void set_default_level(spdlog::level::level_enum level);

// Makes `sink` the only sink of every logger, existing and future (instead of stderr). ctrun uses it so that its
// own lines never block its event loop on a stderr nobody reads (agent/logs/log_sink.hpp).
void use_sink(std::shared_ptr<spdlog::sinks::sink> sink);

}  // namespace ctrun::log
