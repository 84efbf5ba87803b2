#include "common/log.hpp"

#include <cstdlib>
#include <mutex>
#include <string>

#include <spdlog/sinks/stdout_color_sinks.h>

#include "common/text.hpp"

namespace ctrun::log {
namespace {

std::mutex g_mutex;
spdlog::level::level_enum g_default = spdlog::level::warn;
std::shared_ptr<spdlog::sinks::sink> g_sink;  // use_sink(); null: stderr

spdlog::level::level_enum level_from_env() {
  for (const char* var : {"CTRUN_LOG_LEVEL", "LOGLEVEL"}) {
    if (const char* v = std::getenv(var); v != nullptr && *v != '\0') {
      std::string s = text::lower(v);
      if (s == "warning") s = "warn";
      if (s == "fatal") s = "critical";
      auto lvl = spdlog::level::from_str(s);
      // from_str returns off for unknown names; only honour "off" when it was asked for.
      if (lvl != spdlog::level::off || s == "off") return lvl;
    }
  }
  return g_default;
}

}  // namespace

std::shared_ptr<spdlog::logger> get(std::string_view component) {
  std::lock_guard lock(g_mutex);
  std::string name(component);
  if (auto existing = spdlog::get(name)) return existing;
  std::shared_ptr<spdlog::logger> logger;
  if (g_sink) {
    logger = std::make_shared<spdlog::logger>(name, g_sink);
    spdlog::register_logger(logger);
  } else {
    logger = spdlog::stderr_color_mt(name);
  }
  logger->set_level(level_from_env());
  logger->set_pattern("[%Y-%m-%d %H:%M:%S.%e] [%n] [%^%l%$] %v");
  return logger;
}

void use_sink(std::shared_ptr<spdlog::sinks::sink> sink) {
  std::lock_guard lock(g_mutex);
  g_sink = sink;
  spdlog::apply_all([&](const std::shared_ptr<spdlog::logger>& l) {
    l->sinks().clear();
    l->sinks().push_back(sink);
  });
}

void set_default_level(spdlog::level::level_enum level) {
  std::lock_guard lock(g_mutex);
  g_default = level;
}

}  // namespace ctrun::log
