// The live table as text and JSON: every rank's row, the open hang reports and pending point-to-point ops.
#include "agent/hang/table.hpp"

#include <gtest/gtest.h>

#include "tests/agent/hang/records_fixture.hpp"

namespace ctrun::agent::hang {
namespace {
using namespace test;  // NOLINT: the fixture's records

TEST(HangTable, TextAndJsonShowEveryRank) {
  Detector d({.report_after_s = 10});
  auto ranks = rank2_missing(12);
  d.observe(0, ranks);
  const std::string text = table_text(ranks, d);
  EXPECT_NE(text.find("in op"), std::string::npos) << text;
  EXPECT_NE(text.find("between ops"), std::string::npos) << text;
  EXPECT_NE(text.find("hang: rank 2"), std::string::npos) << text;
  auto j = table_json(ranks, d);
  ASSERT_EQ(j["ranks"].size(), 4u);
  EXPECT_EQ(j["ranks"][2]["groups"][0]["state"], "between_ops");
  EXPECT_EQ(j["hangs"][0]["not_entered"][0]["rank"], 2);
}

TEST(HangTable, APendingPointToPointOpIsShownWithItsPeer) {
  Detector d({.report_after_s = 10});
  auto ranks = rank1_in_recv(3);
  d.observe(0, ranks);
  const std::string text = table_text(ranks, d);
  EXPECT_NE(text.find("in p2p      0     recv<-0"), std::string::npos) << text;
  auto j = table_json(ranks, d);
  EXPECT_EQ(j["ranks"][1]["groups"][0]["p2p"]["op"], "recv");
  EXPECT_EQ(j["ranks"][1]["groups"][0]["p2p"]["peer"], 0);
  EXPECT_EQ(j["ranks"][1]["groups"][0]["p2p"]["waited_s"], 3.0);
  EXPECT_TRUE(j["p2p_waits"].empty()) << "3 s is below the report threshold";
}

}  // namespace
}  // namespace ctrun::agent::hang
