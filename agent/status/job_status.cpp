#include "agent/status/job_status.hpp"

#include <chrono>
#include <filesystem>
#include <fstream>
#include <vector>

#include <spdlog/spdlog.h>
#include <nlohmann/json.hpp>

#include "agent/hang/supervisor.hpp"
#include "agent/hang/table.hpp"
#include "agent/hang/watch.hpp"
#include "agent/logs/log_layout.hpp"
#include "agent/status/node_records.hpp"
#include "agent/status/status_server.hpp"
#include "common/log.hpp"

namespace ctrun::agent {

struct JobStatus::Impl {
  boost::asio::io_context& io;
  HangSupervisor& hang;
  HelperLane& lane;
  std::shared_ptr<spdlog::logger> log = log::get("agent");
  std::unique_ptr<status::StatusServer> server;
  std::string port_file;
  std::vector<Section> sections;
  std::unique_ptr<status::NodeRecords> records;
  std::chrono::steady_clock::time_point epoch = std::chrono::steady_clock::now();

  // The view, as the watch and the sections give it now.
  void publish(const hang::HangWatch& watch) {
    if (records) records->tick(std::chrono::duration<double>(std::chrono::steady_clock::now() - epoch).count());
    if (!server) return;
    std::string text = hang::table_text(watch.ranks(), watch.detector());
    nlohmann::json json = hang::table_json(watch.ranks(), watch.detector());
    for (const auto& section : sections) section(text, json);
    server->publish(std::move(text), json.dump());
  }
};

JobStatus::JobStatus(boost::asio::io_context& io, HangSupervisor& hang, HelperLane& lane)
    : impl_(std::make_unique<Impl>(Impl{io, hang, lane})) {
  hang.on_tick([impl = impl_.get()](const hang::HangWatch& watch) { impl->publish(watch); }, /*ticks_only=*/true);
}

JobStatus::~JobStatus() {
  impl_->server.reset();  // its connections close: no route runs after this
  std::error_code ec;
  if (!impl_->port_file.empty()) std::filesystem::remove(impl_->port_file, ec);
}

void JobStatus::start(const LogLayout& layout) {
  auto& i = *impl_;
  try {
    i.server = std::make_unique<status::StatusServer>(i.io, [&hang = i.hang](status::StatusServer::StacksAnswer answer) {
      hang.request_stacks(std::move(answer));
    });
    if (layout.enabled()) {
      std::filesystem::create_directories(layout.run_dir());
      i.port_file = layout.run_dir() + "/status_port";
      std::ofstream(i.port_file) << i.server->port() << "\n";
    }
    i.log->info("live view of the job: ctrun --status {} (or curl http://127.0.0.1:{}/, /status.json)",
                layout.enabled() ? layout.run_dir() : "127.0.0.1:" + std::to_string(i.server->port()),
                i.server->port());
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
