#pragma once
// The job's view as text (`ctrun --status`, GET / for curl): the ranks' table and open hangs (hang::table_text), the
// lines the sections add (checkpoints), then the job's line, its attempts, the nodes and the failure summary. One of
// the model's three renderings (job_view.hpp): /status.json is the model itself, the page its HTML (page.hpp).

#include <string>

#include <nlohmann/json.hpp>

namespace ctrun::agent::status {

// `sections`: the sections' own lines, as they word them.
std::string view_text(const nlohmann::json& model, const std::string& sections);

// "running 3.2 s" / "ran 1 min 2 s": how long an attempt of the model ran.
std::string attempt_words(const nlohmann::json& attempt);

}  // namespace ctrun::agent::status
