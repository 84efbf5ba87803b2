// agent/logs/stream_plan: where each rank's stdout and stderr go (inherit, /dev/null, file, tee) from the --tee and
// --redirects maps and --local-ranks-filter, and the maps' grammar (one value for every rank, or rank:value pairs).
#include "agent/logs/stream_plan.hpp"

#include <gtest/gtest.h>

#include "agent/config/flag_parsers.hpp"

namespace ctrun::agent {
namespace {

TEST(StdSpec, MapAndSingle) {
  auto all = parse_std_spec("3");
  EXPECT_TRUE(all.out(5));
  EXPECT_TRUE(all.err(5));
  auto m = parse_std_spec("0:1,1:2");
  EXPECT_TRUE(m.out(0));
  EXPECT_FALSE(m.err(0));
  EXPECT_TRUE(m.err(1));
  EXPECT_EQ(m.for_rank(2), 0);
}

TEST(StdSpec, RejectsWhatTorchrunRejects) {
  for (const char* bad : {"", "4", "-1", "0:4", "10:1", "0:1,", ",0:1", "0=1", "a", "0:1;1:2", "03"}) {
    EXPECT_THROW(parse_std_spec(bad), FlagValueError) << "'" << bad << "'";
  }
  EXPECT_EQ(parse_std_spec("9:3").for_rank(9), 3);
}

TEST(StreamPlan, TeeRedirectFilter) {
  LaunchConfig c;
  c.logs.tee = parse_std_spec("0:1");
  c.logs.redirects = parse_std_spec("3");
  c.logs.local_ranks_filter = {0};
  EXPECT_EQ(plan_stream(c, 0, 1).mode, StreamMode::kTee);
  EXPECT_TRUE(plan_stream(c, 0, 1).to_console);
  EXPECT_EQ(plan_stream(c, 0, 2).mode, StreamMode::kFile);
  EXPECT_EQ(plan_stream(c, 1, 1).mode, StreamMode::kFile);
  c.logs.redirects = {};
  EXPECT_EQ(plan_stream(c, 1, 1).mode, StreamMode::kNull);
  EXPECT_EQ(plan_stream(c, 0, 2).mode, StreamMode::kInherit);
}

}  // namespace
}  // namespace ctrun::agent
