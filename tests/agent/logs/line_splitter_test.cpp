// agent/logs/line_splitter: output cut into whole lines across reads (an overlong line cut, never held back), and
// the per-line prefix from --log-line-prefix-template or torchrun's default.
#include "agent/logs/line_splitter.hpp"

#include <gtest/gtest.h>

#include <string>
#include <vector>

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

}  // namespace
}  // namespace ctrun::agent
