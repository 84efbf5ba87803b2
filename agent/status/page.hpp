#pragma once
// The job's page (GET / from a browser): one self-contained HTML document, its style sheet and script compiled into
// ctrun (page_assets.hpp; agent/status/page/). Rendered from the model on the server, so a browser whose script does
// not run still shows every rank, the attempts, the failure and the text view (and reloads every 2 s without
// script); the script then takes over: it follows /events (the model, pushed every second), draws the progress
// history of /progress.json, opens stacks (/stacks) and log tails (/logs) on a click. One of the model's three
// renderings (job_view.hpp).

#include <string>

#include <nlohmann/json.hpp>

namespace ctrun::agent::status {

// Rows rendered on the server at most; the script shows the rest (grouped by node, filtered).
inline constexpr std::size_t kServerRows = 512;

// `text`: the model's text rendering (view_text.hpp), shown under the tables.
std::string page_html(const nlohmann::json& model, const std::string& text);

// `s` with &, <, >, " and ' escaped for HTML text and attribute values.
std::string html_escape(const std::string& s);

}  // namespace ctrun::agent::status
