#include "agent/status/job_status.hpp"

#include <chrono>
#include <filesystem>
#include <fstream>
#include <vector>

#include <spdlog/spdlog.h>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <nlohmann/json.hpp>

#include "agent/base/event_log.hpp"
#include "agent/hang/supervisor.hpp"
#include "agent/hang/table.hpp"
#include "agent/hang/watch.hpp"
#include "agent/logs/log_layout.hpp"
#include "agent/status/job_view.hpp"
#include "agent/status/log_tail.hpp"
#include "agent/status/node_records.hpp"
#include "agent/status/page.hpp"
#include "agent/status/status_server.hpp"
#include "agent/status/view_text.hpp"
#include "common/hostname.hpp"
#include "common/log.hpp"

namespace ctrun::agent {
namespace {

constexpr std::size_t kLogBytes = 64 * 1024;     // of each log file, for one rank
constexpr std::size_t kAllLogBytes = 16 * 1024;  // of each, when every local rank's is asked for

double epoch_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// What the page needs pushed at once (a new attempt, an exit, the end), not only at the next second.
bool pushed_at_once(Event e) {
  switch (e) {
    case Event::kRendezvous:
    case Event::kWorkerExit:
    case Event::kRestart:
    case Event::kHangTimeout:
    case Event::kHangSuspected:
    case Event::kMembershipChange:
    case Event::kNodeSteppedOut:
    case Event::kFailed:
    case Event::kNoProgress:
    case Event::kShutdown:
      return true;
    default:
      return false;
  }
}

// Events after which the loop may not run again: pushed now (the write is started at once, on the caller's thread).
bool last_words(Event e) { return e == Event::kFailed || e == Event::kNoProgress || e == Event::kShutdown; }

}  // namespace

struct JobStatus::Impl {
  boost::asio::io_context& io;
  HangSupervisor& hang;
  HelperLane& lane;
  std::shared_ptr<spdlog::logger> log = log::get("agent");
  status::JobView view{host::short_name()};
  std::unique_ptr<status::StatusServer> server;
  const LogLayout* layout = nullptr;
  std::string port_file;
  std::vector<Section> sections;
  std::unique_ptr<status::NodeRecords> records;
  std::chrono::steady_clock::time_point epoch = std::chrono::steady_clock::now();
  boost::asio::steady_timer push_timer{io};
  bool pushing = false;      // the timer runs (someone follows /events)
  bool push_posted = false;  // a push at once is queued on the loop
  std::shared_ptr<bool> alive = std::make_shared<bool>(true);  // the event log's observer outlives this

  // The model now, and the sections' lines for the text.
  nlohmann::json model(std::string* section_text = nullptr) {
    const hang::HangWatch& watch = hang.watch();
    nlohmann::json m = view.model(hang::table_json(watch.ranks(), watch.detector()), epoch_now(),
                                  [this](int local_rank) { return has_logs(local_rank); });
    std::string text;
    for (const auto& section : sections) section(text, m);
    if (section_text) *section_text = std::move(text);
    return m;
  }

  std::string text() {
    std::string sections_text;
    const auto m = model(&sections_text);
    return status::view_text(m, sections_text);
  }

  std::string html() {
    std::string sections_text;
    const auto m = model(&sections_text);
    return status::page_html(m, status::view_text(m, sections_text));
  }

  // This node's log files of local rank `local_rank` in the newest attempt (stdout, stderr); none with --log-dir
  // /dev/null, or when its streams go to the console only (no --tee/--redirects).
  std::vector<std::string> log_files(int local_rank, int restart_count) const {
    std::vector<std::string> out;
    if (!layout || !layout->enabled()) return out;
    std::error_code ec;
    for (auto path : {layout->stdout_file(restart_count, local_rank), layout->stderr_file(restart_count, local_rank)})
      if (std::filesystem::is_regular_file(path, ec)) out.push_back(std::move(path));
    return out;
  }

  bool has_logs(int local_rank) const {
    for (const auto& [rank, w] : view.workers())
      if (w.local_rank == local_rank) return !log_files(local_rank, w.restart_count).empty();
    return false;
  }

  std::optional<std::string> logs(const std::string& which, int lines) const {
    const bool all = which == "all";
    int wanted = -1;
    if (!all) {
      try {
        wanted = std::stoi(which);
      } catch (const std::exception&) {
        return std::nullopt;
      }
    }
    std::string out;
    bool found = false;
    for (const auto& [rank, w] : view.workers()) {
      if (!all && rank != wanted) continue;
      found = true;
      const auto files = log_files(w.local_rank, w.restart_count);
      if (files.empty()) {
        out += "==> rank " + std::to_string(rank) +
               ": no log file here (its output goes to ctrun's console; --tee 3 or --redirects 3 keeps it in "
               "files the page shows) <==\n";
        continue;
      }
      for (const auto& path : files) {
        const std::string tail = status::file_tail(path, all ? kAllLogBytes : kLogBytes, lines);
        out += "==> rank " + std::to_string(rank) + " (local rank " + std::to_string(w.local_rank) + ") " +
               std::filesystem::path(path).filename().string() + " <==\n" + tail;
        if (!tail.empty() && tail.back() != '\n') out += '\n';
      }
    }
    if (!found) return std::nullopt;
    return out;
  }

  void push() {
    if (server && server->viewers() > 0) server->push(model().dump());
  }

  // Every second while someone follows /events; stops when the last one went.
  void keep_pushing() {
    if (pushing) return;
    pushing = true;
    push_timer.expires_after(std::chrono::seconds(1));
    push_timer.async_wait([this](const boost::system::error_code& ec) {
      pushing = false;
      if (ec || !server || server->viewers() == 0) return;
      push();
      keep_pushing();
    });
  }

  void on_event(Event e, const nlohmann::json& fields) {
    view.observe(e, fields, epoch_now());
    if (!server || server->viewers() == 0 || !pushed_at_once(e)) return;
    if (last_words(e)) return push();
    if (push_posted) return;
    push_posted = true;
    boost::asio::post(io, [this, alive = std::weak_ptr<bool>(alive)] {
      if (alive.expired()) return;
      push_posted = false;
      push();
    });
  }

  // A tick of the hang watch: progress is sampled, and the other nodes' records exchanged when due.
  void tick(const hang::HangWatch& watch) {
    if (records) records->tick(std::chrono::duration<double>(std::chrono::steady_clock::now() - epoch).count());
    view.sample(watch.ranks(), epoch_now());
  }
};

JobStatus::JobStatus(boost::asio::io_context& io, HangSupervisor& hang, HelperLane& lane, EventLog& events)
    : impl_(std::make_unique<Impl>(io, hang, lane)) {
  hang.on_tick([impl = impl_.get()](const hang::HangWatch& watch) { impl->tick(watch); }, /*ticks_only=*/true);
  events.observe([impl = impl_.get(), alive = std::weak_ptr<bool>(impl_->alive)](Event e, const nlohmann::json& f) {
    if (!alive.expired()) impl->on_event(e, f);
  });
}

JobStatus::~JobStatus() {
  impl_->alive.reset();
  impl_->push_timer.cancel();
  impl_->server.reset();  // its connections close: no route runs after this
  std::error_code ec;
  if (!impl_->port_file.empty()) std::filesystem::remove(impl_->port_file, ec);
}

void JobStatus::start(const LogLayout& layout) {
  auto& i = *impl_;
  i.layout = &layout;
  try {
    status::StatusServer::Pages pages;
    pages.text = [&i] { return i.text(); };
    pages.json = [&i] { return i.model().dump(); };
    pages.html = [&i] { return i.html(); };
    pages.progress = [&i] { return i.view.progress(epoch_now()).dump(); };
    pages.logs = [&i](const std::string& rank, int lines) { return i.logs(rank, lines); };
    pages.stacks = [&hang = i.hang](status::StatusServer::StacksAnswer answer) { hang.request_stacks(std::move(answer)); };
    pages.viewer_joined = [&i] { i.keep_pushing(); };
    i.server = std::make_unique<status::StatusServer>(i.io, std::move(pages));
    if (layout.enabled()) {
      std::filesystem::create_directories(layout.run_dir());
      i.port_file = layout.run_dir() + "/status_port";
      std::ofstream(i.port_file) << i.server->port() << "\n";
    }
    const std::string target =
        layout.enabled() ? layout.run_dir() : "127.0.0.1:" + std::to_string(i.server->port());
    i.log->info("the job's page: http://127.0.0.1:{}/ (ctrun --status --open {}); as text: ctrun --status {}",
                i.server->port(), target, target);
  } catch (const std::exception& e) {
    i.log->warn("no live view: {}", e.what());
  }
}

void JobStatus::add_section(Section section) { impl_->sections.push_back(std::move(section)); }

void JobStatus::share_node_record(std::function<std::string()> record,
                                  std::function<void(std::map<int, std::string> records)> received) {
  impl_->records = std::make_unique<status::NodeRecords>(impl_->lane, std::move(record), std::move(received));
}

void JobStatus::begin_attempt(std::uint64_t attempt, int restart_count, const rdzv::RoundInfo& round) {
  if (impl_->records) impl_->records->begin_attempt(attempt, restart_count, round);
}

void JobStatus::end_attempt() {
  if (impl_->records) impl_->records->end_attempt();
}

}  // namespace ctrun::agent
