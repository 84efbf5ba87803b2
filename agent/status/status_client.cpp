#include "agent/status/status_client.hpp"

#include <spawn.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "common/http/client.hpp"
#include "rendezvous/parameters.hpp"

namespace ctrun::agent {
namespace {

namespace fs = std::filesystem;

constexpr const char* kUsage =
    "usage: ctrun --status [--json | --stacks | --open | --url] [LOG_DIR | RUN_DIR | HOST:PORT]";
constexpr int kTimeoutMs = 3000;
constexpr int kStacksTimeoutMs = 15000;  // the agent answers within its 2 s dump wait, or 10 s at most

std::optional<StatusTarget> from_port_file(const fs::path& file) {
  std::ifstream in(file);
  int port = 0;
  if (!(in >> port) || port <= 0 || port > 65535) return std::nullopt;  // being written, or not ours
  return StatusTarget{"127.0.0.1", port, file.string()};
}

// Every <dir>/*/status_port, newest first (a run dir's file is written when its agent starts).
void add_runs_of(const fs::path& dir, std::vector<std::pair<fs::file_time_type, fs::path>>& files) {
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const fs::path file = it->path() / "status_port";
    std::error_code ec2;
    const auto when = fs::last_write_time(file, ec2);
    if (!ec2) files.emplace_back(when, file);
  }
}

// HOST:PORT (an IPv6 host bracketed), read as --rdzv-endpoint is; nullopt for anything else or port 0.
std::optional<StatusTarget> host_port(const std::string& target) {
  try {
    const auto ep = rdzv::parse_endpoint(target, 0);
    if (ep.port == 0) return std::nullopt;
    return StatusTarget{ep.host, ep.port, target};
  } catch (const std::invalid_argument&) {
    return std::nullopt;
  }
}

// The page's address, as a browser on this machine reaches it.
std::string page_url(const StatusTarget& t) {
  const bool v6 = t.host.find(':') != std::string::npos;
  return "http://" + (v6 ? "[" + t.host + "]" : t.host) + ":" + std::to_string(t.port) + "/";
}

// The browser to open a URL with: $BROWSER's first entry (the usual colon-separated list), else xdg-open on PATH.
std::string browser_of(const EnvLookup& env) {
  if (auto b = env("BROWSER"); b && !b->empty()) return b->substr(0, b->find(':'));
  const auto path = env("PATH");
  std::string dirs = path ? *path : "/usr/bin:/bin";
  for (std::size_t at = 0; at <= dirs.size();) {
    const auto colon = std::min(dirs.find(':', at), dirs.size());
    const fs::path candidate = fs::path(dirs.substr(at, colon - at)) / "xdg-open";
    if (::access(candidate.c_str(), X_OK) == 0) return candidate.string();
    at = colon + 1;
  }
  return "";
}

// Starts `browser url` and leaves it running (a browser outlives this command). False when it cannot be started.
bool open_in(const std::string& browser, const std::string& url) {
  std::vector<char*> argv = {const_cast<char*>(browser.c_str()), const_cast<char*>(url.c_str()), nullptr};
  pid_t pid = 0;
  return ::posix_spawnp(&pid, browser.c_str(), nullptr, nullptr, argv.data(), environ) == 0;
}

// --open / --url: the page of the first job that answers.
int show_page(const StatusTarget& t, bool open, const EnvLookup& env) {
  const std::string url = page_url(t);
  std::printf("%s\n", url.c_str());
  std::fflush(stdout);
  if (!open) return 0;
  const std::string browser = browser_of(env);
  if (!browser.empty() && open_in(browser, url)) return 0;
  std::fprintf(stderr,
               "ctrun --status --open: no browser here (set BROWSER, or install xdg-open): open %s in one. From "
               "another machine: ssh -N -L %d:127.0.0.1:%d <this host>, then http://127.0.0.1:%d/ there\n",
               url.c_str(), t.port, t.port, t.port);
  return 0;
}

}  // namespace

std::vector<StatusTarget> status_targets(const std::optional<std::string>& target, const std::string& tmpdir) {
  std::vector<std::pair<fs::file_time_type, fs::path>> files;
  std::error_code ec;
  if (!target) {
    for (fs::directory_iterator it(tmpdir, ec), end; !ec && it != end; it.increment(ec)) {
      if (it->path().filename().string().starts_with("torchelastic_")) add_runs_of(it->path(), files);
    }
  } else if (fs::is_directory(*target, ec)) {
    if (auto own = from_port_file(fs::path(*target) / "status_port")) return {*own};  // a run dir
    add_runs_of(*target, files);                                                      // a log dir
  } else if (auto hp = host_port(*target)) {
    return {*hp};
  } else {
    throw UsageError("'" + *target + "' is neither a directory (a --log-dir or one run in it) nor HOST:PORT");
  }
  std::sort(files.begin(), files.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  std::vector<StatusTarget> out;
  for (const auto& [when, file] : files) {
    if (auto t = from_port_file(file)) out.push_back(*t);
  }
  return out;
}

int status_main(const std::vector<std::string>& args, const EnvLookup& env) {
  bool json = false, stacks = false, open = false, url = false;
  std::optional<std::string> target;
  for (const auto& a : args) {
    if (a == "-h" || a == "--help") {
      std::printf(
          "%s\n\nPrint a running job's live table: every rank's state, current collective and its number, "
          "time in it,\nrestarts and lag (docs/hang.md). Without a target: the newest running job under the "
          "default log\nbase ($TMPDIR or /tmp). --json: the same as JSON. --stacks: every local rank's Python "
          "stack now\n(any Python worker, whatever its backend). --url: the address of the job's page (every rank, "
          "the\nattempts, progress, checkpoints, nodes, logs; docs/cli.md); --open: the same, opened in $BROWSER or "
          "with\nxdg-open.\n",
          kUsage);
      return 0;
    }
    if (a == "--json") {
      json = true;
    } else if (a == "--stacks") {
      stacks = true;
    } else if (a == "--open") {
      open = true;
    } else if (a == "--url") {
      url = true;
    } else if (!a.empty() && a[0] == '-') {
      std::fprintf(stderr, "%s\nctrun: error: unrecognized argument: %s\n", kUsage, a.c_str());
      return 2;
    } else if (target) {
      std::fprintf(stderr, "%s\nctrun: error: one target at most (got '%s' and '%s')\n", kUsage, target->c_str(),
                   a.c_str());
      return 2;
    } else {
      target = a;
    }
  }
  if (static_cast<int>(json) + static_cast<int>(stacks) + static_cast<int>(open || url) > 1) {
    std::fprintf(stderr, "%s\nctrun: error: one of --json, --stacks and --open/--url at a time\n", kUsage);
    return 2;
  }
  const auto tmp = env("TMPDIR");
  const std::string base = tmp && !tmp->empty() ? *tmp : "/tmp";
  std::vector<StatusTarget> targets;
  try {
    targets = status_targets(target, base);
  } catch (const UsageError& e) {
    std::fprintf(stderr, "%s\nctrun: error: %s\n", kUsage, e.what());
    return 2;
  }
  std::string failures;
  for (const auto& t : targets) {
    try {
      if (open || url) {
        http::get(t.host, t.port, "/status.json", kTimeoutMs);  // a job that answers
        return show_page(t, open, env);
      }
      const std::string body = stacks ? http::get(t.host, t.port, "/stacks", kStacksTimeoutMs)
                                      : http::get(t.host, t.port, json ? "/status.json" : "/", kTimeoutMs);
      std::fwrite(body.data(), 1, body.size(), stdout);
      return 0;
    } catch (const std::exception& e) {
      failures += "\n  " + t.source + ": " + e.what();  // a job that ended: its agent is gone
    }
  }
  const std::string where = target ? *target : "the default log base (" + base + ")";
  std::fprintf(stderr, "ctrun --status: no running job answered under %s%s\n", where.c_str(),
               failures.empty() ? " (no status_port file: is the job running with a log dir?)" : failures.c_str());
  return 1;
}

}  // namespace ctrun::agent
