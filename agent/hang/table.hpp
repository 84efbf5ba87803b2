#pragma once
// The live table of a job (every rank: state, op, sequence number, time in it, restarts, lag) as text and as
// JSON, then the open hang reports, worded as the log words them (wording.hpp).

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "agent/hang/detector.hpp"
#include "agent/hang/records.hpp"
#include "agent/hang/wording.hpp"

namespace ctrun::agent::hang {

// The live table. `lag_of` from the detector (seconds per op).
std::string table_text(const std::vector<RankRecord>& ranks, const Detector& detector);
nlohmann::json table_json(const std::vector<RankRecord>& ranks, const Detector& detector);

}  // namespace ctrun::agent::hang
