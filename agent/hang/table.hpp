#pragma once
// Words for what the detector finds, and the live table of a job (every rank: state, op, sequence number, time
// in it, restarts, lag) as text and as JSON. One place for the wording, so the console, the log, the JSON
// event log and the live view say the same.

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "agent/hang/detector.hpp"
#include "agent/hang/records.hpp"

namespace ctrun::agent::hang {

// "rank 2 (host vm, local_rank 2, pid 4711) has not entered all_reduce #3 of group 0; ranks 0,1,3 have waited
// 10.2 s" (`ranks`: where host/local_rank/pid come from). A verdict adds "(hang timeout 60 s)".
std::string describe(const HangFinding& finding, const std::vector<RankRecord>& ranks);
// "rank 2 is last into the collectives of group 0: 0.50 s per op behind the others' median (120 ops in 60 s;
// median over recent windows 0.49 s)"
std::string describe(const StragglerFinding& finding);
// "rank 3 (host vm, local_rank 3, pid 4712) has waited 5 min 0 s in recv from rank 2 of group 0 (4096 bytes);
// rank 2: inside all_reduce #7 of group 1 for 5 min 0 s" (resolved: "...: recv from rank 2 of group 0 finished
// after 6 min 1 s").
std::string describe(const P2pFinding& finding, const std::vector<RankRecord>& ranks);

nlohmann::json to_json(const HangFinding& finding);
nlohmann::json to_json(const StragglerFinding& finding);
nlohmann::json to_json(const P2pFinding& finding);

// The live table. `lag_of` from the detector (seconds per op).
std::string table_text(const std::vector<RankRecord>& ranks, const Detector& detector);
nlohmann::json table_json(const std::vector<RankRecord>& ranks, const Detector& detector);

// "1.5 s", "2 min 3 s", "12 ms"
std::string human_seconds(double s);

}  // namespace ctrun::agent::hang
