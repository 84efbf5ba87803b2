// ctstore: a PyTorch-compatible TCPStore server as a standalone daemon, e.g. a rendezvous endpoint for
// many agents. Serves both wire dialects (torch <= 2.0 and >= 2.1) on one port.
//
//   ctstore --port 29400 [--host ADDR] [--max-key-len N] [--max-value-len N] [--max-keys-per-request N]
//           [--max-total-bytes N] [--max-connections N] [--stats-interval SEC] [--metrics-port PORT]
//           [--secret-file FILE]
//
//   ctstore get|set|add|delete|list|wait|watch --endpoint HOST:PORT ...   (client verbs, client_verbs.cpp)
//
// SIGTERM / SIGINT: clean exit 0. A failure of the server loop (e.g. out of memory): exit 3 with a message. SIGUSR1 (or
// every --stats-interval seconds): one JSON line of counters on stdout. --metrics-port: Prometheus metrics at
// http://HOST:PORT/metrics (apps/ctstore/store_metrics.cpp). Signals are taken by an asio::signal_set on the main
// thread, so no work runs in a signal handler.

#include <algorithm>
#include <csignal>
#include <cstdlib>
#include <cstdio>
#include <iostream>
#include <memory>
#include <optional>

#include <CLI/CLI.hpp>
#include <boost/asio.hpp>
#include <nlohmann/json.hpp>

#include "apps/ctstore/client_verbs.hpp"
#include "apps/ctstore/store_metrics.hpp"
#include "common/auth/crypto.hpp"
#include "common/auth/secret.hpp"
#include "common/log.hpp"
#include "common/metrics/endpoint.hpp"
#include "common/version.hpp"
#include "store/server.hpp"
#include "store/store.hpp"
#include "rendezvous/parameters.hpp"

namespace {

namespace asio = boost::asio;

std::string stats_json(ctrun::store::Server& server) {
  auto s = server.stats();
  nlohmann::json ops = nlohmann::json::object();
  for (const auto& [name, n] : s.ops) ops[name] = n;
  nlohmann::json refused = nlohmann::json::object();
  for (const auto& [reason, n] : s.refused) refused[reason] = n;
  nlohmann::json j = {{"connections_open", s.connections_open},
                      {"connections_accepted", s.connections_accepted},
                      {"connections_rejected", s.connections_rejected},
                      {"bytes_in", s.bytes_in},
                      {"bytes_out", s.bytes_out},
                      {"keys", s.keys},
                      {"bytes", s.bytes},
                      {"pending_waits", s.pending_waits},
                      {"held_bytes", s.held_bytes},
                      {"ops", ops},
                      {"refused", refused}};
  return j.dump();
}

}  // namespace

int main(int argc, char** argv) {
  if (ctrun::ctstore::is_client_verb(argc, argv)) return ctrun::ctstore::run_client_verb(argc, argv);
  ctrun::log::set_default_level(spdlog::level::info);
  auto log = ctrun::log::get("ctstore");

  ctrun::store::ServerOptions opts;
  opts.port = ctrun::rdzv::kDefaultC10dPort;
  double stats_interval = 0;
  CLI::App app{"ctstore: a PyTorch-compatible TCPStore server (torch <= 2.0 and >= 2.1 clients on one port)"};
  app.add_option("--port", opts.port, "TCP port; 0 picks a free one (printed on stdout)")
      ->capture_default_str()
      ->check(CLI::Range(0, 65535));
  app.add_option("--host", opts.host, "address to bind; '::' serves IPv6 and IPv4")->capture_default_str();
  app.add_option("--max-key-len", opts.limits.max_key_len, "longest key in bytes")->capture_default_str();
  app.add_option("--max-value-len", opts.limits.max_value_len, "largest value in bytes")->capture_default_str();
  app.add_option("--max-keys-per-request", opts.limits.max_keys_per_request,
                 "most keys in one CHECK/WAIT/MULTI_GET/MULTI_SET")
      ->capture_default_str();
  app.add_option("--max-total-bytes", opts.max_total_bytes,
                 "memory bound: keys + values + buffered requests and replies")
      ->capture_default_str();
  app.add_option("--max-connections", opts.max_connections,
                 "connections beyond this are accepted and closed at once; 0: the descriptor limit allows")
      ->capture_default_str();
  double request_timeout_s = 30;
  app.add_option(
         "--request-timeout", request_timeout_s,
         "close a connection whose request is still incomplete this many seconds after its first byte, plus 1 s per "
         "64 KiB received (0: never)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app.add_option("--max-pending-bytes", opts.max_pending_output_bytes,
                 "most unread reply bytes per connection; a larger reply is refused before it is built")
      ->capture_default_str();
  app.add_option("--stats-interval", stats_interval, "print a JSON stats line every SEC seconds (0: only on SIGUSR1)")
      ->check(CLI::NonNegativeNumber);
  std::optional<std::uint16_t> metrics_port;
  app.add_option("--metrics-port", metrics_port,
                 "serve Prometheus metrics at http://HOST:PORT/metrics on --host (0: a free port, printed on stdout); "
                 "off unless given")
      ->check(CLI::Range(0, 65535));
  std::string secret_file;
  app.add_option("--secret-file", secret_file,
                 "the job's secret (a file, or CTRUN_SECRET): only agents that prove they hold it are served, as a "
                 "ctrun-hosted rendezvous store does (docs/security.md); torch's own clients have no handshake");
  app.set_version_flag("--version", ctrun::version_line("ctstore"), "Print the version and git revision and exit.");
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::cerr << "ctstore: " << e.what() << "\n\n" << app.help();
    return 2;
  }

  opts.partial_request_timeout = std::chrono::milliseconds(static_cast<long long>(request_timeout_s * 1000));
  try {
    opts.secret = ctrun::auth::secret_from(secret_file, std::getenv(ctrun::auth::kSecretVariable));
    ::unsetenv(ctrun::auth::kSecretVariable);
    if (opts.secret) {
      ctrun::auth::load_crypto();
      if (const auto warning = ctrun::auth::secret_file_warning(secret_file); !warning.empty())
        log->warn("{}", warning);
    }
  } catch (const std::exception& e) {
    std::cerr << "ctstore: " << e.what() << "\n";
    return 2;
  }
  std::signal(SIGPIPE, SIG_IGN);  // the server raises its descriptor limit to the hard limit itself

  // The signal set exists before the server starts, so a SIGTERM sent right after the "listening" line is
  // always a clean stop.
  asio::io_context io;
  asio::signal_set signals(io, SIGTERM, SIGINT, SIGUSR1);

  // A failed server loop (it has closed every socket by then) ends the process with exit 3, never a
  // daemon that holds the port and answers nothing.
  bool failed = false;
  opts.on_failure = [&](const std::string& what) {
    asio::post(io, [&, what] {
      log->error("the store failed: {}; exiting", what);
      failed = true;
      io.stop();
    });
  };
  ctrun::store::Server server(opts);
  try {
    server.start();
  } catch (const ctrun::store::StoreError& e) {
    log->error("{}", e.what());
    return 1;
  }
  // IPv6 literals are bracketed so that HOST:PORT stays unambiguous ("[::]:29400").
  const std::string shown =
      opts.host.find(':') != std::string::npos && opts.host.front() != '[' ? "[" + opts.host + "]" : opts.host;
  log->info("serving TCPStore on {}:{} (both dialects, at most {} connections)", shown, server.port(),
            server.max_connections());
  std::cout << "ctstore listening on " << shown << ":" << server.port() << std::endl;

  // Scrapes run on the endpoint's own threads; stats() copies the server's counters on the store's loop.
  std::unique_ptr<ctrun::metrics::Endpoint> metrics;
  if (metrics_port) {
    ctrun::metrics::EndpointOptions mo;
    mo.host = opts.host;
    mo.port = *metrics_port;
    // --request-timeout bounds a scrape's request too, at most the endpoint's own 10 s (a scrape is one short
    // request; common/metrics/endpoint.hpp).
    if (opts.partial_request_timeout.count() > 0)
      mo.request_timeout = std::min(mo.request_timeout, opts.partial_request_timeout);
    try {
      metrics = std::make_unique<ctrun::metrics::Endpoint>(mo, [&server, &opts] {
        return ctrun::ctstore::store_families(server.stats(), server.max_connections(), opts.max_total_bytes);
      });
    } catch (const std::exception& e) {
      log->error("{}", e.what());
      server.stop();
      return 1;
    }
    log->info("serving Prometheus metrics at {}", metrics->url());
    std::cout << "ctstore metrics at " << metrics->url() << std::endl;
  }

  bool stopping = false;
  std::function<void()> wait_signal = [&] {
    signals.async_wait([&](const boost::system::error_code& ec, int sig) {
      if (ec) return;
      if (sig == SIGUSR1) {
        std::cout << stats_json(server) << std::endl;
        wait_signal();
        return;
      }
      log->info("received {}, shutting down", sig == SIGTERM ? "SIGTERM" : "SIGINT");
      stopping = true;
      io.stop();
    });
  };
  wait_signal();

  asio::steady_timer stats_timer(io);
  std::function<void()> tick = [&] {
    stats_timer.expires_after(std::chrono::milliseconds(static_cast<long long>(stats_interval * 1000)));
    stats_timer.async_wait([&](const boost::system::error_code& ec) {
      if (ec) return;
      std::cout << stats_json(server) << std::endl;
      tick();
    });
  };
  if (stats_interval > 0) tick();

  io.run();
  metrics.reset();  // before the server: a scrape in progress asks the server's loop
  server.stop();
  if (failed) return 3;
  log->info("stopped");
  return stopping ? 0 : 1;
}
