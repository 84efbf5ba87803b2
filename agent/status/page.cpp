#include "agent/status/page.hpp"

#include <fmt/format.h>

#include "agent/hang/wording.hpp"
#include "agent/status/page_assets.hpp"
#include "agent/status/view_text.hpp"

namespace ctrun::agent::status {
namespace {

using json = nlohmann::json;

std::string str(const json& j, const char* key) {
  const auto it = j.find(key);
  if (it == j.end() || it->is_null()) return "";
  return it->is_string() ? it->get<std::string>() : it->dump();
}

// A row's state as shown: "in op", "exited 1", "hung".
std::string state_of(const json& r) {
  std::string s = str(r, "state");
  if (s == "exited") return "exited " + (r.contains("signal") ? str(r, "signal") : str(r, "exitcode"));
  if (s == "no_groups") return "no groups";
  for (auto& c : s)
    if (c == '_') c = ' ';
  return s;
}

std::string rank_row(const json& r) {
  const std::string state = str(r, "state");
  const std::string seq = str(r, "seq");
  const json in_state = r.value("in_state_s", json());
  const json rate = r.value("rate", json());
  const std::string stack = r.value("local", false)
                                ? fmt::format("<a class=\"stack\" href=\"/stacks\" data-rank=\"{}\">stack</a>", str(r, "rank"))
                                : "";
  return fmt::format(
      "<tr class=\"rank st-{}\" data-rank=\"{}\"><td class=\"r\">{}</td><td>{}</td><td>{}</td><td class=\"r\">{}</td>"
      "<td class=\"r\">{}</td><td class=\"state\">{}</td><td>{}{}</td><td class=\"r\">{}</td><td class=\"r\">{}</td>"
      "<td class=\"r\">{}</td><td class=\"r rate\">{}</td><td class=\"spark\"></td><td>{}</td></tr>\n",
      html_escape(state), str(r, "rank"), str(r, "rank"), html_escape(str(r, "node")), html_escape(str(r, "host")),
      str(r, "local_rank"), str(r, "pid"), html_escape(state_of(r)), html_escape(str(r, "op")),
      seq.empty() ? "" : " #" + seq, in_state.is_number() ? hang::human_seconds(in_state.get<double>()) : "-",
      str(r, "restarts"), hang::human_seconds(r.value("lag_s", 0.0)),
      rate.is_number() ? fmt::format("{:.1f}", rate.get<double>()) : "-", stack);
}

std::string ranks_table(const json& rows) {
  std::string out =
      "<table id=\"ranks\"><thead><tr><th>rank</th><th>node</th><th>host</th><th>local</th><th>pid</th>"
      "<th>state</th><th>op #seq</th><th>time in it</th><th>restarts</th><th>lag/op</th><th>ops/s</th>"
      "<th>progress</th><th></th></tr></thead>\n<tbody id=\"rank-rows\">\n";
  std::size_t n = 0;
  for (const auto& r : rows) {
    if (n++ == kServerRows) break;
    out += rank_row(r);
  }
  out += "</tbody></table>\n";
  if (rows.size() > kServerRows)
    out += fmt::format("<p class=\"note\">{} more ranks: the page's script shows them by node.</p>\n",
                       rows.size() - kServerRows);
  return out;
}

std::string attempts_table(const json& attempts) {
  std::string out =
      "<table id=\"attempts\"><thead><tr><th>#</th><th>restart</th><th>round</th><th>ranks</th><th>time</th>"
      "<th>outcome</th><th>cause</th><th>resumed from</th></tr></thead><tbody id=\"attempt-rows\">\n";
  for (const auto& a : attempts) {
    const json cause = a.value("cause", json());
    out += fmt::format(
        "<tr class=\"attempt out-{}\" data-attempt=\"{}\"><td class=\"r\">{}</td><td class=\"r\">{}</td>"
        "<td class=\"r\">{}</td><td class=\"r\">{}</td><td>{}</td><td class=\"outcome\">{}</td><td class=\"cause\">{}</td>"
        "<td class=\"resume\">{}</td></tr>\n",
        html_escape(str(a, "outcome")), str(a, "attempt"), str(a, "attempt"), str(a, "restart_count"), str(a, "round"),
        str(a, "world_size"), html_escape(attempt_words(a)), html_escape(str(a, "outcome")),
        cause.is_object() ? html_escape(str(cause, "text")) : "",
        a.value("checkpoints", false)
            ? (a.value("resume_step", json()).is_number() ? "step " + str(a, "resume_step") : "no step held")
            : "-");
  }
  return out + "</tbody></table>\n";
}

}  // namespace

std::string html_escape(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return out;
}

std::string page_html(const json& model, const std::string& text) {
  const json job = model.value("job", json::object());
  // The model for the script, safe inside <script>: no "</" can end the element early.
  std::string data = model.dump();
  for (std::size_t at = 0; (at = data.find("</", at)) != std::string::npos; at += 3) data.replace(at, 2, "<\\/");
  std::string alerts;
  for (const auto& h : model.value("hangs", json::array()))
    alerts += "<p class=\"alert hang\">hang: " + html_escape(str(h, "words")) + "</p>\n";
  const json failure = model.value("failure", json());
  std::string out;
  out.reserve(text.size() * 2 + data.size() + page_css().size() + page_js().size() + 8192);
  out += "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
         "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n<title>ctrun: " +
         html_escape(str(job, "run_id")) +
         "</title>\n<noscript><meta http-equiv=\"refresh\" content=\"2\"></noscript>\n<style>\n";
  out += page_css();
  out += "</style></head>\n<body>\n<header id=\"top\"><h1>ctrun <span id=\"run\">" + html_escape(str(job, "run_id")) +
         "</span></h1><p id=\"summary\">" +
         html_escape(fmt::format("{} · attempt {} · {} rank(s) · {} of {} restarts used", str(job, "state"),
                                 str(job, "attempts"), model.value("ranks", json::array()).size(), str(job, "restarts"),
                                 str(job, "max_restarts"))) +
         "</p><p id=\"live\" class=\"live off\">static</p></header>\n<div id=\"alerts\">" + alerts + "</div>\n<main>\n";
  out += "<section id=\"ranks-panel\"><h2>Ranks</h2><div class=\"tools\"><input id=\"filter\" type=\"search\" "
         "placeholder=\"filter: 5, 8-15, node 2, host, hung, exited, all_reduce\" hidden><span id=\"shown\"></span>"
         "</div>\n" +
         ranks_table(model.value("ranks", json::array())) +
         "<div id=\"stack\" hidden><h3 id=\"stack-title\"></h3><pre id=\"stack-text\"></pre></div></section>\n";
  out += "<section id=\"progress-panel\"><h2>Progress</h2><div id=\"throughput\"></div><div id=\"heat-box\">"
         "<canvas id=\"heat\" width=\"1\" height=\"1\"></canvas></div><p class=\"note\" id=\"history-note\"></p>"
         "</section>\n";
  out += "<section id=\"timeline-panel\"><h2>Attempts</h2><div id=\"timeline\"></div>\n" +
         attempts_table(model.value("attempts", json::array())) + "</section>\n";
  out += "<section id=\"checkpoints-panel\"><h2>In-memory checkpoints</h2><div id=\"checkpoints\"></div></section>\n"
         "<section id=\"nodes-panel\"><h2>Nodes</h2><div id=\"nodes\"></div></section>\n"
         "<section id=\"logs-panel\"><h2>Logs</h2><div class=\"tools\"><select id=\"log-rank\"></select>"
         "<label><input id=\"log-follow\" type=\"checkbox\" checked> follow</label></div><pre id=\"log\"></pre>"
         "</section>\n";
  out += std::string("<section id=\"failure-panel\"") + (failure.is_object() ? "" : " hidden") +
         "><h2>Failure</h2><pre id=\"failure\">" + (failure.is_object() ? html_escape(str(failure, "summary")) : "") +
         "</pre></section>\n";
  out += "<section id=\"text-panel\"><details><summary>As text (<code>ctrun --status</code>)</summary><pre id=\"text\">" +
         html_escape(text) + "</pre></details></section>\n</main>\n";
  out += "<script id=\"model\" type=\"application/json\">" + data + "</script>\n<script>\n";
  out += page_js();
  out += "</script>\n</body></html>\n";
  return out;
}

}  // namespace ctrun::agent::status
