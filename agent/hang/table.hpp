#pragma once
// The live table of a job (every rank: state, op, sequence number, time in it, restarts, lag) as JSON, then the open
// hang reports worded as the log words them (wording.hpp); and that JSON as the text table `ctrun --status` prints.
// The agent's live view (agent/status/job_view.hpp) builds the job's model on table_json's rows.

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "agent/hang/detector.hpp"
#include "agent/hang/records.hpp"
#include "agent/hang/wording.hpp"

namespace ctrun::agent::hang {

// {"ranks": [...], "hangs": [...], "p2p_waits": [...]}. Each rank's row has its groups and, for the table, the group
// it is shown in (shown_group): "state" (in_op, between_ops, in_p2p, no_groups), "group", "op" ("recv<-3" for a
// pending recv from rank 3), "seq" (null in p2p), "in_state_s"; and "lag_s" from the detector. Each hang and p2p
// wait has its "words" as the log says them. `lag_of` from the detector (seconds per op).
nlohmann::json table_json(const std::vector<RankRecord>& ranks, const Detector& detector);
// The text table of table_json's document: a row per rank (the state a row's "state" says: "hung", "exited 1", ...
// as given), then "hang: ..." and "p2p wait: ..." lines.
std::string table_text(const nlohmann::json& table);
inline std::string table_text(const std::vector<RankRecord>& ranks, const Detector& detector) {
  return table_text(table_json(ranks, detector));
}

}  // namespace ctrun::agent::hang
