#pragma once
// The live view of a running job (docs/hang.md, "The live view"): the model of the job this agent shows, built once
// per tick of the hang watch from the watch's ranks and the sections other rooms add (the node's checkpoints, the
// other nodes' records), and served by StatusServer (GET /, /status.json, /stacks) on 127.0.0.1 at the port written
// into <run dir>/status_port, where `ctrun --status` (status_client.hpp) finds it. On the agent's loop; never fatal.

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

class HangSupervisor;
class HelperLane;
class LogLayout;

class JobStatus {
 public:
  // Adds to the view at each tick (on the loop, never blocking): lines after the ranks' table, and keys of
  // /status.json.
  using Section = std::function<void(std::string& text, nlohmann::json& json)>;

  JobStatus(boost::asio::io_context& io, HangSupervisor& hang, HelperLane& lane);
  ~JobStatus();  // the port file goes, so that `ctrun --status` finds live jobs only
  JobStatus(const JobStatus&) = delete;
  JobStatus& operator=(const JobStatus&) = delete;

  // Listens (127.0.0.1, a free port) and says where. Never fatal: a view that cannot listen is said and skipped.
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
