#pragma once
// --event-log FILE: one JSON object per line for every agent event (rendezvous, worker start, worker exit
// with code or signal, restart, shutdown), each with "event", "time" (epoch seconds, float) and details.
// Written and flushed per event so a tail -f or a scheduler sees it at once.

#include <cstdio>
#include <optional>
#include <string>

#include <nlohmann/json_fwd.hpp>

namespace ctrun::agent {

class EventLog {
 public:
  explicit EventLog(const std::optional<std::string>& path);  // nullopt: every emit is a no-op
  ~EventLog();
  EventLog(const EventLog&) = delete;
  EventLog& operator=(const EventLog&) = delete;

  bool enabled() const { return file_ != nullptr; }
  void emit(const std::string& event, const nlohmann::json& fields);

 private:
  std::FILE* file_ = nullptr;
  std::string path_;
  bool warned_ = false;  // the one warning on a write error (disk full) was given
};

}  // namespace ctrun::agent
