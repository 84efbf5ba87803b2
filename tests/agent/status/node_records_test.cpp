// Each node's record for group rank 0's live view (agent/status/node_records.hpp): three nodes over one in-memory
// store, each on a helper lane of its own. Group rank 0 gets the others' records; it reads them in two requests
// whatever the number of nodes; a node with nothing to show writes nothing.
#include "agent/status/node_records.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <map>
#include <memory>

#include <thread>

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>

#include "agent/base/helper_lane.hpp"
#include "store/counting_store.hpp"
#include "store/memory_store.hpp"

namespace ctrun::agent::status {
namespace {

struct Node {
  Node(std::shared_ptr<store::Store> shared, int rank, int nodes, std::string record)
      : traffic(std::make_shared<store::StoreTraffic>()),
        store(std::make_shared<store::CountingStore>(std::move(shared), traffic)),
        records(lane, [record] { return record; }, [this](std::map<int, std::string> r) { received = std::move(r); }) {
    round.group_rank = rank;
    round.group_world_size = nodes;
    round.store = store;
  }
  // One exchange at `now_s`, run to its end on this node's loop: the lane's work, then its continuation (posted just
  // after the lane says it is idle).
  void tick(double now_s) {
    records.tick(now_s);
    for (int i = 0; i < 5000 && lane.busy(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    auto guard = boost::asio::make_work_guard(io);
    io.restart();
    io.run_for(std::chrono::milliseconds(100));
  }
  boost::asio::io_context io;
  HelperLane lane{io};
  std::shared_ptr<store::StoreTraffic> traffic;
  std::shared_ptr<store::CountingStore> store;
  rdzv::RoundInfo round;
  std::map<int, std::string> received;
  NodeRecords records;
};

TEST(NodeRecords, GroupRankZeroReadsEveryPublishedRecordInTwoRequests) {
  auto shared = std::make_shared<store::MemoryStore>();
  Node zero(shared, 0, 3, "{\"zero\":1}"), one(shared, 1, 3, "{\"one\":1}"), two(shared, 2, 3, "");
  for (Node* n : {&zero, &one, &two}) n->records.begin_attempt(1, 4, n->round);
  one.tick(10);
  two.tick(10);
  EXPECT_EQ(two.traffic->ops.load(), 0u);  // nothing to show: no store op
  const auto before = zero.traffic->ops.load();
  zero.tick(10);
  // Its own record and its index entry, then the index and the listed records: four requests.
  EXPECT_EQ(zero.traffic->ops.load() - before, 4u);
  EXPECT_EQ(zero.received, (std::map<int, std::string>{{1, "{\"one\":1}"}}));

  // Later exchanges cost its own (paced) write and two reads, and a node that publishes late appears.
  Node late(shared, 2, 3, "{\"two\":2}");
  late.records.begin_attempt(1, 4, late.round);
  late.tick(11);
  const auto again = zero.traffic->ops.load();
  zero.tick(12.5);
  EXPECT_EQ(zero.traffic->ops.load() - again, 3u);
  EXPECT_EQ(zero.received.size(), 2u);
  EXPECT_EQ(zero.received.at(2), "{\"two\":2}");

  // A new attempt starts empty: the records of the last one are not shown as this one's.
  zero.records.begin_attempt(2, 5, zero.round);
  EXPECT_TRUE(zero.received.empty());
}

}  // namespace
}  // namespace ctrun::agent::status
