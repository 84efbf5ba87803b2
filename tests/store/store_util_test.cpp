#include "store/store_util.hpp"

#include <gtest/gtest.h>

using namespace ctrun::store;

TEST(StoreUtil, ParseStollLikeCxx) {
  EXPECT_EQ(parse_stoll("42"), 42);
  EXPECT_EQ(parse_stoll("-7"), -7);
  EXPECT_EQ(parse_stoll("  +3"), 3);
  EXPECT_EQ(parse_stoll("12abc"), 12);
  EXPECT_EQ(parse_stoll("-9223372036854775808"), INT64_MIN);
  EXPECT_EQ(parse_stoll("9223372036854775807"), INT64_MAX);
  EXPECT_FALSE(parse_stoll("9223372036854775808"));
  EXPECT_FALSE(parse_stoll("abc"));
  EXPECT_FALSE(parse_stoll(""));
  EXPECT_FALSE(parse_stoll("-"));
}

TEST(StoreUtil, TimeoutMessageNamesKeysAndTimeout) {
  auto msg = wait_timeout_message({"/a", std::string("b\0c", 3)}, std::chrono::milliseconds(1500));
  EXPECT_NE(msg.find("1500 ms"), std::string::npos);
  EXPECT_NE(msg.find("'/a'"), std::string::npos);
  EXPECT_NE(msg.find("b\\x00c"), std::string::npos);
}
