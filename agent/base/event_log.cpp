#include "agent/base/event_log.hpp"

#include <cerrno>
#include <chrono>
#include <cstring>
#include <stdexcept>

#include <nlohmann/json.hpp>

namespace ctrun::agent {

EventLog::EventLog(const std::optional<std::string>& path) {
  if (!path) return;
  path_ = *path;
  file_ = std::fopen(path->c_str(), "ae");
  if (file_ == nullptr) {
    throw std::runtime_error("cannot open --event-log " + *path + ": " + std::strerror(errno));
  }
}

EventLog::~EventLog() {
  if (file_ != nullptr) std::fclose(file_);
}

void EventLog::emit(const std::string& event, const nlohmann::json& fields) {
  if (file_ == nullptr) return;
  nlohmann::json line = fields.is_object() ? fields : nlohmann::json::object();
  line["event"] = event;
  auto now = std::chrono::system_clock::now().time_since_epoch();
  line["time"] = std::chrono::duration<double>(now).count();
  std::string text = line.dump() + "\n";
  const bool ok = std::fwrite(text.data(), 1, text.size(), file_) == text.size() && std::fflush(file_) == 0;
  if (!ok && !warned_) {
    warned_ = true;  // once: a full disk would otherwise say it for every event
    const int err = errno;
    std::fprintf(stderr, "ctrun: warning: cannot write the event log %s: %s; later events may be missing\n",
                 path_.c_str(), std::strerror(err));
  }
}

}  // namespace ctrun::agent
