// The event log's vocabulary: one catalogue in the enum's order, names unique, each line written with its name,
// and docs/cli.md carrying the list exactly as the catalogue generates it.
#include "agent/base/event_log.hpp"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

namespace ctrun::agent {
namespace {

TEST(EventLog, TheCatalogueHasEveryKindOnceInTheEnumsOrder) {
  std::set<std::string_view> names;
  std::size_t i = 0;
  for (const auto& k : event_catalogue()) {
    EXPECT_EQ(static_cast<std::size_t>(k.event), i++) << k.name;
    EXPECT_TRUE(names.insert(k.name).second) << "twice: " << k.name;
    EXPECT_EQ(k.name.find_first_not_of("abcdefghijklmnopqrstuvwxyz0123456789_"), std::string_view::npos) << k.name;
    EXPECT_FALSE(k.doc.empty()) << k.name;
    EXPECT_EQ(k.doc.find('\n'), std::string_view::npos) << k.name << ": one line";
  }
  EXPECT_EQ(static_cast<std::size_t>(Event::kTeardownHang) + 1, event_catalogue().size()) << "the last kind is in the table";
  EXPECT_EQ(event_name(Event::kHangSuspected), "hang_suspected");
}

TEST(EventLog, WritesOneLineWithTheKindsName) {
  const std::string path = ::testing::TempDir() + "/event_log_test.jsonl";
  std::filesystem::remove(path);
  {
    EventLog log(path);
    log.emit(Event::kWorkerExit, {{"rank", 3}});
  }
  std::ifstream in(path);
  std::string line;
  ASSERT_TRUE(std::getline(in, line));
  const auto j = nlohmann::json::parse(line);
  EXPECT_EQ(j.at("event"), "worker_exit");
  EXPECT_EQ(j.at("rank"), 3);
  EXPECT_TRUE(j.at("time").is_number_float());
  std::filesystem::remove(path);
}

TEST(EventLog, CliMdListsTheCatalogue) {
  const std::string want = "<!-- BEGIN generated event catalogue: agent/base/event_log.cpp -->\n" +
                           event_catalogue_markdown() + "<!-- END generated event catalogue -->";
  std::ifstream in(std::string(CTRUN_SOURCE_DIR) + "/docs/cli.md");
  ASSERT_TRUE(in) << "cannot read docs/cli.md";
  std::stringstream doc;
  doc << in.rdbuf();
  EXPECT_NE(doc.str().find(want), std::string::npos)
      << "docs/cli.md's event list disagrees with agent/base/event_log.cpp's catalogue; replace it with:\n"
      << want;
}

}  // namespace
}  // namespace ctrun::agent
