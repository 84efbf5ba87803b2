// Client verbs for people: read and change a live job's store from a shell.
//
//   ctstore list   [--endpoint HOST:PORT] [PREFIX]      every key (LIST_KEYS), sorted, one per line
//   ctstore get    [--endpoint HOST:PORT] KEY           the value, then a newline
//   ctstore set    [--endpoint HOST:PORT] KEY VALUE
//   ctstore add    [--endpoint HOST:PORT] KEY [DELTA]   prints the new value (DELTA defaults to 1)
//   ctstore delete [--endpoint HOST:PORT] KEY           exit 1 if there was no such key
//   ctstore wait   [--endpoint HOST:PORT] [--timeout S] KEY...   exit 1 on timeout
//   ctstore watch  [--endpoint HOST:PORT] [--interval S] [--count N] KEY   prints each new value
//
// Keys are the keys on the wire, exactly as `list` shows them: torch's clients prefix theirs with "/"
// (e.g. "/rdzv/..."), so `get /foo` reads what a worker set as "foo". The dialect is detected (LIST_KEYS
// needs a v2 server: ctstore or torch >= 2.1's libuv server). `watch` polls (no wire dialect offers a
// watch that works on every server), printing the value each time it changes.
#include "apps/ctstore/client_verbs.hpp"

#include <csignal>
#include <cstdlib>
#include <iostream>
#include <set>
#include <thread>

#include <CLI/CLI.hpp>

#include "common/auth/secret.hpp"
#include "store/tcp_store.hpp"
#include "common/text.hpp"
#include "rendezvous/parameters.hpp"

namespace ctrun::ctstore {

namespace {

const std::set<std::string> kVerbs = {"get", "set", "add", "delete", "list", "wait", "watch"};

volatile std::sig_atomic_t g_interrupted = 0;

// HOST:PORT, [IPV6]:PORT.
bool parse_endpoint(const std::string& s, std::string& host, std::uint16_t& port) {
  auto colon = s.rfind(':');
  if (colon == std::string::npos || colon + 1 == s.size()) return false;
  host = s.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  const auto p = text::parse_int<int>(std::string_view(s).substr(colon + 1));
  if (!p || *p <= 0 || *p > 65535 || host.empty()) return false;
  port = static_cast<std::uint16_t>(*p);
  return true;
}

}  // namespace

bool is_client_verb(int argc, char** argv) { return argc > 1 && kVerbs.count(argv[1]) > 0; }

int run_client_verb(int argc, char** argv) {
  const std::string verb = argv[1];
  CLI::App app{"ctstore " + verb + ": a client verb on a running TCPStore (ctstore, or torch's own server)",
               "ctstore " + verb};
  std::string endpoint = "127.0.0.1:" + std::to_string(rdzv::kDefaultC10dPort);
  double timeout_s = 30, interval_s = 0.5;
  int count = 0;
  std::string key, value, prefix;
  std::vector<std::string> keys;
  std::int64_t delta = 1;
  app.add_option("--endpoint", endpoint, "the store's HOST:PORT (MASTER_ADDR:MASTER_PORT of the job)")
      ->capture_default_str();
  std::string secret_file;
  app.add_option("--secret-file", secret_file,
                 "the job's secret (a file, or CTRUN_SECRET), for a store that asks for it (docs/security.md)");
  app.add_option("--timeout", timeout_s, "seconds to connect and to wait for replies")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  if (verb == "list") {
    app.add_option("prefix", prefix, "only keys starting with this");
  } else if (verb == "wait") {
    app.add_option("keys", keys, "keys to wait for")->required();
  } else {
    app.add_option("key", key, "the key, as on the wire (torch's clients prefix theirs with '/')")->required();
    if (verb == "set") app.add_option("value", value, "the value")->required();
    if (verb == "add") app.add_option("delta", delta, "the increment")->capture_default_str();
    if (verb == "watch") {
      app.add_option("--interval", interval_s, "seconds between polls")->capture_default_str()->check(
          CLI::PositiveNumber);
      app.add_option("--count", count, "stop after this many values (0: until Ctrl-C)")->check(
          CLI::NonNegativeNumber);
    }
  }
  std::string host;
  std::uint16_t port = 0;
  try {
    app.parse(argc - 1, argv + 1);
    if (!parse_endpoint(endpoint, host, port))
      throw CLI::ValidationError("--endpoint", "'" + endpoint + "' is not HOST:PORT");
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::cerr << "ctstore " << verb << ": " << e.what() << "\n\n" << app.help();
    return 2;
  }

  store::TcpStoreOptions o;
  o.host = host;
  o.port = port;
  o.key_prefix = "";  // the keys as they are on the wire
  o.timeout = std::chrono::milliseconds(static_cast<long long>(timeout_s * 1000));
  o.connect_timeout = o.timeout;
  try {
    o.secret = auth::secret_from(secret_file, std::getenv(auth::kSecretVariable));
  } catch (const std::exception& e) {
    std::cerr << "ctstore " << verb << ": " << e.what() << "\n";
    return 2;
  }
  try {
    store::TcpStore s(o);
    if (verb == "list") {
      auto all = s.list_keys();
      std::sort(all.begin(), all.end());
      for (const auto& k : all)
        if (k.compare(0, prefix.size(), prefix) == 0) std::cout << k << "\n";
    } else if (verb == "get") {
      if (!s.check({key})) {
        std::cerr << "ctstore get: no key '" << key << "' at " << endpoint
                  << " (`ctstore list` shows the keys; torch's clients prefix theirs with '/')\n";
        return 1;
      }
      std::cout << s.get(key) << "\n";
    } else if (verb == "set") {
      s.set(key, value);
    } else if (verb == "add") {
      std::cout << s.add(key, delta) << "\n";
    } else if (verb == "delete") {
      if (!s.delete_key(key)) {
        std::cerr << "ctstore delete: no key '" << key << "' at " << endpoint << "\n";
        return 1;
      }
    } else if (verb == "wait") {
      s.wait(keys, o.timeout);
    } else if (verb == "watch") {
      std::signal(SIGINT, [](int) { g_interrupted = 1; });
      std::optional<std::string> last;
      bool first = true;
      for (int seen = 0; !g_interrupted && (count == 0 || seen < count);) {
        std::optional<std::string> now;
        if (s.check({key})) now = s.get(key);
        if (first || now != last) {
          std::cout << (now ? *now : std::string("(no such key)")) << std::endl;
          if (now || !first) ++seen;
          last = now;
          first = false;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(static_cast<long long>(interval_s * 1000)));
      }
    }
  } catch (const store::StoreError& e) {
    std::cerr << "ctstore " << verb << ": " << e.what() << "\n";
    return 1;
  }
  return 0;
}

}  // namespace ctrun::ctstore
