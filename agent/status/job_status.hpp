#pragma once
// The live view of a running job (docs/hang.md "The live view", docs/cli.md "The job's page"): the model of the job
// (job_view.hpp: built from the agent's events and the hang watch's ticks, plus the sections other rooms add: the
// node's checkpoints, the other nodes' records), rendered when asked as text (`ctrun --status`), JSON and the job's
// page, and served by StatusServer on 127.0.0.1 at the port written into <run dir>/status_port. While a browser
// follows the page, the model is pushed to it every second; a job nobody watches renders nothing. On the agent's
// loop; never fatal.

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>

#include <nlohmann/json_fwd.hpp>

#include "rendezvous/handler.hpp"

namespace boost::asio {
class io_context;
}

namespace ctrun::agent {

class EventLog;
class HangSupervisor;
class HelperLane;
class LogLayout;

class JobStatus {
 public:
  // Adds to the view when it is rendered (on the loop, never blocking): lines after the ranks' table, and keys of
  // the model (/status.json).
  using Section = std::function<void(std::string& text, nlohmann::json& json)>;

  // Follows every event `events` emits from now on (the attempts' timeline).
  JobStatus(boost::asio::io_context& io, HangSupervisor& hang, HelperLane& lane, EventLog& events);
  ~JobStatus();  // the port file goes, so that `ctrun --status` finds live jobs only
  JobStatus(const JobStatus&) = delete;
  JobStatus& operator=(const JobStatus&) = delete;

  // Listens (127.0.0.1, a free port) and says where (the page's URL, at info). Never fatal: a view that cannot
  // listen is said and skipped.
  void start(const LogLayout& layout);
  void add_section(Section section);
  // Several nodes: this node's record for group rank 0's view, and what group rank 0 does with the others' (see
  // node_records.hpp).
  void share_node_record(std::function<std::string()> record,
                         std::function<void(std::map<int, std::string> records)> received);
  void begin_attempt(std::uint64_t attempt, int restart_count, const rdzv::RoundInfo& round);
  void end_attempt();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ctrun::agent
