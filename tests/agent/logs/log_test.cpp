// Log routing pieces: whole-line splitting, prefixes, redirect/tee maps and the directory layout.
#include <gtest/gtest.h>

#include <filesystem>

#include "agent/config/flag_parsers.hpp"
#include "agent/logs/line_splitter.hpp"
#include "agent/logs/log_layout.hpp"
#include "agent/logs/stream_plan.hpp"

namespace ctrun::agent {
namespace {

TEST(LineSplitter, WholeLinesAcrossChunks) {
  LineSplitter s;
  std::vector<std::string> lines;
  auto sink = [&](std::string_view l) { lines.emplace_back(l); };
  s.feed("ab", sink);
  s.feed("c\nde", sink);
  s.feed("f\ng\nh", sink);
  EXPECT_EQ(lines, (std::vector<std::string>{"abc\n", "def\n", "g\n"}));
  s.flush(sink);
  EXPECT_EQ(lines.back(), "h\n");
}

TEST(LineSplitter, OverlongLineIsCut) {
  LineSplitter s(4);
  std::vector<std::string> lines;
  s.feed("abcdef", [&](std::string_view l) { lines.emplace_back(l); });
  EXPECT_EQ(lines, (std::vector<std::string>{"abcdef\n"}));
}

TEST(Prefix, DefaultAndTemplate) {
  EXPECT_EQ(log_line_prefix(nullptr, "default", 3, 7, "h"), "[default3]:");
  std::string t = "[${role_name}-${rank}@$hostname r$local_rank] $$ ${nope}";
  EXPECT_EQ(log_line_prefix(&t, "w", 1, 5, "node"), "[w-5@node r1] $ ${nope}");
}

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

TEST(StreamPlan, TeeRedirectFilter) {
  LaunchConfig c;
  c.tee = parse_std_spec("0:1");
  c.redirects = parse_std_spec("3");
  c.local_ranks_filter = {0};
  EXPECT_EQ(plan_stream(c, 0, 1).mode, StreamMode::kTee);
  EXPECT_TRUE(plan_stream(c, 0, 1).to_console);
  EXPECT_EQ(plan_stream(c, 0, 2).mode, StreamMode::kFile);
  EXPECT_EQ(plan_stream(c, 1, 1).mode, StreamMode::kFile);
  c.redirects = {};
  EXPECT_EQ(plan_stream(c, 1, 1).mode, StreamMode::kNull);
  EXPECT_EQ(plan_stream(c, 0, 2).mode, StreamMode::kInherit);
}

TEST(LogLayout, TorchrunLayout) {
  std::string base = (std::filesystem::path(::testing::TempDir()) / "ctrun_layout").lexically_normal().string();
  std::filesystem::remove_all(base);
  LogLayout layout(base, "myrun");
  ASSERT_TRUE(layout.enabled());
  EXPECT_EQ(layout.run_dir().rfind(base + "/myrun_", 0), 0u);
  layout.prepare_attempt(1, 2);
  EXPECT_TRUE(std::filesystem::is_directory(layout.run_dir() + "/attempt_1/1"));
  EXPECT_EQ(layout.stdout_file(1, 0), layout.run_dir() + "/attempt_1/0/stdout.log");
  EXPECT_EQ(layout.error_file(1, 1), layout.run_dir() + "/attempt_1/1/error.json");
  LogLayout none(std::string("/dev/null"), "r");
  EXPECT_FALSE(none.enabled());
  EXPECT_EQ(none.error_file(0, 0), "");
  std::filesystem::remove_all(base);
}

}  // namespace
}  // namespace ctrun::agent
