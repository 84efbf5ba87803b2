// ProcessGroup::monitored_barrier, as gloo's: rank 0 waits for a message from every other rank within the timeout
// and names the ones that did not arrive; then it releases them. Its messages use tags reserved for it
// (comm/tags.hpp) and go to the backend directly, past the check that refuses those tags to users.

#include <algorithm>
#include <chrono>
#include <string>
#include <vector>

#include "comm/process_group.hpp"
#include "comm/tags.hpp"
#include "common/text.hpp"

namespace ctrun::comm {
namespace {
// The messages carry nothing: a receive that a late rank answers after rank 0 gave up writes into no memory.
Buffer empty_token() { return Buffer(static_cast<void*>(nullptr), 0, DataType::kUInt8); }
}  // namespace

void ProcessGroup::monitored_barrier(Duration timeout, bool wait_all_ranks) {
  require_member();
  if (timeout <= Duration::zero()) timeout = options_.timeout;
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  if (rank_ != 0) {
    backend_->batch_p2p({P2POp::send(empty_token(), 0, kMonitoredBarrierArriveTag)})->wait();
    backend_->batch_p2p({P2POp::recv(empty_token(), 0, kMonitoredBarrierReleaseTag)})->wait(timeout);
    return;
  }
  std::vector<WorkPtr> arrivals;
  for (int r = 1; r < size(); ++r) {
    arrivals.push_back(backend_->batch_p2p({P2POp::recv(empty_token(), r, kMonitoredBarrierArriveTag)}));
  }
  std::vector<int> missing;
  for (int r = 1; r < size(); ++r) {
    const auto left = std::chrono::duration_cast<Duration>(deadline - std::chrono::steady_clock::now());
    try {
      arrivals[static_cast<std::size_t>(r - 1)]->wait(std::max(left, Duration(1)));
    } catch (const std::exception&) {
      missing.push_back(r);
      if (!wait_all_ranks) break;
    }
  }
  if (!missing.empty()) {
    const std::string ranks = text::join_with(missing, ", ", [](int r) { return std::to_string(r); });
    throw TimeoutError("Rank" + std::string(missing.size() > 1 ? "s " : " ") + ranks +
                       " failed to pass monitoredBarrier in " + std::to_string(timeout.count()) + " ms");
  }
  for (int r = 1; r < size(); ++r) {
    backend_->batch_p2p({P2POp::send(empty_token(), r, kMonitoredBarrierReleaseTag)})->wait();
  }
}

}  // namespace ctrun::comm
