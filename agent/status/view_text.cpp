#include "agent/status/view_text.hpp"

#include <fmt/format.h>

#include "agent/hang/table.hpp"
#include "agent/hang/wording.hpp"

namespace ctrun::agent::status {
namespace {

using json = nlohmann::json;

std::string str(const json& j, const char* key) {
  const auto it = j.find(key);
  return it != j.end() && it->is_string() ? it->get<std::string>() : std::string();
}

std::string number_or_dash(const json& j, const char* key) {
  const auto it = j.find(key);
  return it != j.end() && it->is_number() ? it->dump() : "-";
}

std::string job_line(const json& job, const json& model) {
  std::string line = fmt::format("job {}: {}, attempt {} ({} of {} restarts used)", str(job, "run_id"),
                                 str(job, "state"), job.value("attempts", 0), job.value("restarts", 0),
                                 job.value("max_restarts", 0));
  const int ranks = static_cast<int>(model.value("ranks", json::array()).size());
  line += fmt::format(", {} rank(s) on {} node(s)", ranks, std::max(job.value("nodes", 1), 1));
  if (job.contains("job_rate") && job["job_rate"].is_number())
    line += fmt::format(", {:.1f} collectives/s (median rank)", job["job_rate"].get<double>());
  if (job.contains("newest_step") && job["newest_step"].is_number())
    line += ", newest checkpoint step " + job["newest_step"].dump();
  return line + "\n";
}

}  // namespace

std::string attempt_words(const json& a) {
  const double s = a.value("duration_s", 0.0);
  return (a.value("outcome", std::string()) == "running" ? "running " : "ran ") + hang::human_seconds(s);
}

std::string view_text(const json& model, const std::string& sections) {
  std::string out = hang::table_text(model);
  out += sections;
  const json job = model.value("job", json::object());
  out += job_line(job, model);
  const json attempts = model.value("attempts", json::array());
  if (!attempts.empty()) out += "attempts:\n";
  for (const auto& a : attempts) {
    const json cause = a.value("cause", json());
    std::string line = fmt::format("  #{:<3} restart {:<3} {:<18} {}", a.value("attempt", 0), number_or_dash(a, "restart_count"),
                                   attempt_words(a), str(a, "outcome"));
    if (cause.is_object()) line += ": " + str(cause, "text");
    if (a.value("checkpoints", false)) line += "; resumed from step " + number_or_dash(a, "resume_step");
    out += line + "\n";
  }
  const json nodes = model.value("nodes", json::object());
  const json list = nodes.value("nodes", json::array());
  if (list.size() > 1 || nodes.value("spares_waiting", 0) > 0) {
    std::string line = fmt::format("nodes: {}", list.size());
    for (const auto& n : list)
      line += fmt::format("; node {}: ranks {}-{}{}{}", str(n, "node"), n.value("first_rank", 0), n.value("last_rank", 0),
                          n.value("hung", 0) ? fmt::format(", {} hung", n.value("hung", 0)) : "",
                          n.value("exited", 0) ? fmt::format(", {} exited", n.value("exited", 0)) : "");
    if (nodes.value("spares_waiting", 0) > 0) line += fmt::format("; {} waiting to join", nodes.value("spares_waiting", 0));
    out += line + "\n";
  }
  const double now = job.value("now", 0.0);
  for (const auto& e : nodes.value("events", json::array()))
    out += fmt::format("  {} ago: {}\n", hang::human_seconds(now - e.value("time", now)), str(e, "text"));
  const json failure = model.value("failure", json());
  if (failure.is_object()) out += "failure: " + str(failure, "summary") + "\n";
  return out;
}

}  // namespace ctrun::agent::status
