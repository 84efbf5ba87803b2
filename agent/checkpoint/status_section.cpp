#include "agent/checkpoint/status_section.hpp"

#include <map>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "agent/checkpoint/keeper.hpp"
#include "agent/checkpoint/summary_view.hpp"
#include "agent/status/job_status.hpp"

namespace ctrun::agent {

void show_checkpoints(JobStatus& status, const CheckpointKeeper& keeper,
                      std::function<const rdzv::RoundInfo&()> round) {
  // Group rank 0: the other nodes' latest records of this attempt.
  auto others = std::make_shared<std::map<int, std::string>>();
  status.share_node_record(
      [&keeper] {
        const auto held = keeper.summary();
        return checkpoint::holds_something(held) ? checkpoint::node_record(held) : "";
      },
      [others](std::map<int, std::string> records) { *others = std::move(records); });
  status.add_section([&keeper, others, round = std::move(round)](std::string& text, nlohmann::json& json) {
    const auto held = keeper.summary();
    text += checkpoint::summary_text(held);
    auto j = checkpoint::summary_json(held);
    if (j.is_null()) return;
    const rdzv::RoundInfo& r = round();
    if (r.group_rank == 0 && r.group_world_size > 1) {
      text += checkpoint::nodes_text(*others, 0, r.group_world_size);
      j["nodes"] = checkpoint::nodes_json(*others, 0, r.group_world_size);
    }
    json["checkpoints"] = std::move(j);
  });
}

}  // namespace ctrun::agent
