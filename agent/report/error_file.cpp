#include "agent/report/error_file.hpp"

#include <ctime>
#include <fstream>

#include <nlohmann/json.hpp>

#include "common/log.hpp"
#include "common/text.hpp"

namespace ctrun::agent {
namespace {

std::optional<std::int64_t> to_seconds(const nlohmann::json& v) {
  if (v.is_number_integer()) return v.get<std::int64_t>();
  if (v.is_number()) return static_cast<std::int64_t>(v.get<double>());
  if (v.is_string()) return text::parse_int<std::int64_t>(text::trim(v.get<std::string>()));
  return std::nullopt;
}

}  // namespace

std::optional<WorkerErrorData> read_worker_error_file(const std::string& path) {
  if (path.empty()) return std::nullopt;
  std::ifstream in(path);
  if (!in) return std::nullopt;
  nlohmann::json doc = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded() || !doc.is_object() || !doc.contains("message")) {
    ctrun::log::get("agent")->warn("ignoring malformed error file {}", path);
    return std::nullopt;
  }
  WorkerErrorData out;
  const auto& message = doc["message"];
  if (message.is_string()) {
    out.traceback = message.get<std::string>();
    if (doc.contains("timestamp")) out.timestamp = to_seconds(doc["timestamp"]);
  } else if (message.is_object()) {
    const auto extra = message.value("extraInfo", nlohmann::json::object());
    if (extra.is_object() && extra.contains("py_callstack") && extra["py_callstack"].is_string()) {
      out.traceback = extra["py_callstack"].get<std::string>();
    } else if (message.contains("message") && message["message"].is_string()) {
      out.traceback = message["message"].get<std::string>();
    } else {
      out.traceback = "<N/A>";
    }
    if (extra.is_object() && extra.contains("timestamp")) out.timestamp = to_seconds(extra["timestamp"]);
  } else {
    return std::nullopt;
  }
  return out;
}

void write_agent_error_file(const std::string& path, const std::string& root_error_file, int root_exitcode,
                            const std::string& summary) {
  nlohmann::json doc;
  std::ifstream in(root_error_file);
  if (in) doc = nlohmann::json::parse(in, nullptr, false);
  if (!doc.is_discarded() && doc.is_object() && doc.contains("message") && doc["message"].is_object()) {
    doc["message"]["errorCode"] = root_exitcode;
  } else {
    doc = {{"message",
            {{"message", "ChildFailedError: " + summary},
             {"extraInfo", {{"py_callstack", summary}, {"timestamp", std::to_string(std::time(nullptr))}}},
             {"errorCode", root_exitcode}}}};
  }
  std::ofstream out(path, std::ios::trunc);
  if (!out) {
    ctrun::log::get("agent")->warn("cannot write TORCHELASTIC_ERROR_FILE {}", path);
    return;
  }
  out << doc.dump(2) << "\n";
}

void write_hang_error_file(const std::string& path, const std::string& message, const std::string& stack) {
  if (path.empty() || read_worker_error_file(path)) return;  // the worker's own error comes first
  const nlohmann::json doc = {{"message",
                               {{"message", message},
                                {"extraInfo",
                                 {{"py_callstack", stack.empty() ? message : message + "\n" + stack},
                                  {"timestamp", std::to_string(std::time(nullptr))}}}}}};
  std::ofstream out(path, std::ios::trunc);
  if (!out) {
    ctrun::log::get("agent")->warn("cannot write TORCHELASTIC_ERROR_FILE {}", path);
    return;
  }
  out << doc.dump(2) << "\n";
}

}  // namespace ctrun::agent
