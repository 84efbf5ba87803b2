#pragma once
// The one place that words what the hang stack finds: the detector's findings and the watch's typed output become
// log lines, console stacks, event-log entries, failure notes and the verdicts other nodes read; the live table
// (table.hpp) words its rows with the same functions. So the console, the log, the JSON event log and the live
// view say the same.

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "agent/base/event_log.hpp"
#include "agent/hang/detector.hpp"
#include "agent/hang/records.hpp"
#include "agent/hang/summary.hpp"
#include "agent/hang/watch.hpp"

namespace ctrun::agent::hang {

// "1.5 s", "2 min 3 s", "12 ms"
std::string human_seconds(double s);

// "rank 2 (host vm, local_rank 2, pid 4711) has not entered all_reduce #3 of group 0; ranks 0,1,3 have waited
// 10.2 s" (`ranks`: where host/local_rank/pid come from).
std::string describe(const HangFinding& finding, const std::vector<RankRecord>& ranks);
// "rank 2 is last into the collectives of group 0: 0.50 s per op behind the others' median (120 ops in 60 s;
// median over recent windows 0.49 s)"
std::string describe(const StragglerFinding& finding);
// "rank 3 (host vm, local_rank 3, pid 4712) has waited 5 min 0 s in recv from rank 2 of group 0 (4096 bytes);
// rank 2: inside all_reduce #7 of group 1 for 5 min 0 s" (resolved: "...: recv from rank 2 of group 0 finished
// after 6 min 1 s").
std::string describe(const P2pFinding& finding, const std::vector<RankRecord>& ranks);
// The group a rank is shown in (its live-table row, a point-to-point report's peer): the op it has waited in
// longest, else the point-to-point op pending longest, else its most recent group; nullptr when it has none.
const GroupRecord* shown_group(const RankRecord& rank);
// What a rank's live-table row shows of a pending point-to-point op: "recv from rank 2" (a peer with no record
// seen: "recv from group rank 3").
std::string p2p_words(bool recv, int peer, int peer_group_rank);

// The event-log entry of a finding: its kind and its fields (the log adds "event" and "time").
Event event_of(const HangFinding& finding);
Event event_of(const P2pFinding& finding);
nlohmann::json to_json(const HangFinding& finding);
nlohmann::json to_json(const StragglerFinding& finding);
nlohmann::json to_json(const P2pFinding& finding);

// One thing a tick found, as the agent says it: a log line (a warning, else info) and an event-log entry.
struct Said {
  bool warning = false;
  std::string line;
  Event event;
  nlohmann::json fields;
};
// Everything a tick found, in order: hangs, point-to-point waits, stragglers, a quiet job. `config`: the
// thresholds the lines name.
std::vector<Said> say(const WatchOutput& out, const std::vector<RankRecord>& ranks, const DetectorConfig& config);

// A culprit's stack for the console: "stack of rank 2 (pid 4711, <file>):\n<dump>".
std::string stack_words(const RankStack& stack);
// request_stacks()' answer: every rank's stack, or why it has none.
std::string requested_stacks_words(const std::vector<RankStack>& stacks, const std::string& host, double dump_wait_s);
// Why a rank is treated as failed: its error file and the failure summary say it.
std::string failure_note(const Failure& failure, const std::vector<RankRecord>& ranks, const DetectorConfig& config);
// The open verdicts, worded for the other nodes' agents (group rank 0's agent publishes them).
Verdicts verdicts_of(const Detector& detector, const std::vector<RankRecord>& ranks);

}  // namespace ctrun::agent::hang
