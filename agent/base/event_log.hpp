#pragma once
// --event-log FILE: one JSON object per line for every agent event, each with "event" (its name in the catalogue
// below), "time" (epoch seconds, float) and details. Written and flushed per event so a tail -f or a scheduler
// sees it at once. The catalogue is the whole vocabulary: every part of the agent emits one of these kinds, and
// docs/cli.md's list of events is generated from it (tests/agent/base/event_log_test.cpp checks it).

#include <cstdio>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace ctrun::agent {

enum class Event {
  kAgentStart,
  kRendezvous,
  kRendezvousFailed,
  kMembershipChange,
  kWorkerStart,
  kWorkerExit,
  kRestart,
  kSignal,
  kSignalForwarded,
  kEscapeesKilled,
  kFileTimerExpired,
  kAgentFailure,
  kFailed,
  kConsoleDropped,
  kShutdown,
  kMetrics,
  kHangSuspected,
  kHangTimeout,
  kHangResolved,
  kHangFailed,
  kP2pWait,
  kP2pWaitResolved,
  kStraggler,
  kQuiet,
  kHangTimeoutLearned,
  kWorkerUnkillable,
  kNodeUnhealthy,
  kCheckpointHeld,
  kCheckpointCommit,
  kCheckpointLoad,
  kCheckpointRefused,
  kCheckpointSpilled,
  kCheckpointReplicated,
  kCheckpointReplicationFailed,
  kCheckpointFetched,
  kNoProgress,
  kHealthCheckFailed,
  kNodeSteppedOut,
  kNodeReturned,
  kTeardownCrash,
  kTeardownHang,
};

struct EventKind {
  Event event;
  std::string_view name;  // the "event" field
  std::string_view doc;   // one line: when it is written and what it carries
};

// Every kind, in the enum's order.
std::span<const EventKind> event_catalogue();
std::string_view event_name(Event event);
// The catalogue as the Markdown list docs/cli.md carries.
std::string event_catalogue_markdown();

class EventLog {
 public:
  explicit EventLog(const std::optional<std::string>& path);  // nullopt: every emit is a no-op
  ~EventLog();
  EventLog(const EventLog&) = delete;
  EventLog& operator=(const EventLog&) = delete;

  bool enabled() const { return file_ != nullptr; }
  void emit(Event event, const nlohmann::json& fields);
  // Every event, with or without a file, is also handed to the observers, in the order emitted, on the thread that
  // emits (the agent's loop): the live view builds the job's timeline from the same events (agent/status/).
  using Observer = std::function<void(Event event, const nlohmann::json& fields)>;
  void observe(Observer observer);

 private:
  std::vector<Observer> observers_;
  std::FILE* file_ = nullptr;
  std::string path_;
  bool warned_ = false;  // the one warning on a write error (disk full) was given
};

}  // namespace ctrun::agent
