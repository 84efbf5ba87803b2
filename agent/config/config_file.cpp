#include "agent/config/config_file.hpp"

#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "agent/base/command_line.hpp"
#include "agent/config/flags.hpp"

namespace ctrun::agent {

std::map<std::string, std::string> read_config_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw UsageError("cannot read --config file '" + path + "'");
  std::stringstream text;
  text << in.rdbuf();
  return parse_config_json(text.str(), path);
}

std::map<std::string, std::string> parse_config_json(const std::string& text, const std::string& origin) {
  nlohmann::json doc;
  try {
    doc = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    throw UsageError("--config " + origin + ": not valid JSON: " + e.what());
  }
  if (!doc.is_object()) throw UsageError("--config " + origin + ": expected a JSON object of flag names to values");
  std::map<std::string, std::string> out;
  for (const auto& [key, value] : doc.items()) {
    std::string dest = key.rfind("--", 0) == 0 ? key.substr(2) : key;
    for (auto& c : dest) c = c == '-' ? '_' : c;
    const FlagSpec* flag = find_flag(dest);
    if (flag == nullptr || dest == "config") {
      throw UsageError("--config " + origin + ": unknown key '" + key + "' (keys are ctrun flag names)");
    }
    if (value.is_boolean()) {
      out[dest] = value.get<bool>() ? "1" : "0";
    } else if (value.is_string()) {
      out[dest] = value.get<std::string>();
    } else if (value.is_number_integer()) {
      out[dest] = std::to_string(value.get<long long>());
    } else if (value.is_number()) {
      std::ostringstream s;
      s << value.get<double>();
      out[dest] = s.str();
    } else {
      throw UsageError("--config " + origin + ": key '" + key + "' must be a string, number or boolean");
    }
  }
  return out;
}

}  // namespace ctrun::agent
