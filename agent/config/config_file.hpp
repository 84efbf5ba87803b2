#pragma once
// --config FILE.json: a JSON object whose keys are flag names (dashed or underscored, without the leading
// "--") and whose values are strings, numbers or booleans. The command line overrides the file; the file
// overrides PET_* and the defaults. Examples live in configs/.

#include <map>
#include <string>

namespace ctrun::agent {

// dest -> value as the command line would spell it. Throws UsageError naming the file and the bad key.
std::map<std::string, std::string> read_config_file(const std::string& path);

// Same, from JSON text (for tests); `origin` names the source in errors.
std::map<std::string, std::string> parse_config_json(const std::string& text, const std::string& origin);

}  // namespace ctrun::agent
