// Values in PostgreSQL's text format (db/text_format.hpp), without a
// database: array literals for array parameters and COPY fields. That the
// server reads them back exactly is checked by DbConnection.CopyIn* and the
// bulk send tests.

#include <gtest/gtest.h>

#include <optional>
#include <string>
#include <vector>

#include "cmdbus/db/text_format.hpp"

using namespace cmdbus;

TEST(DbTextFormat, ArrayLiteralsQuoteEveryTextElement) {
  EXPECT_EQ(db::array_literal(std::vector<std::string>{}), "{}");
  EXPECT_EQ(db::array_literal(std::vector<std::string>{"a", "b c", ""}),
            R"({"a","b c",""})");
  // Quotes and backslashes are escaped; NULL as text stays a string.
  EXPECT_EQ(db::array_literal(std::vector<std::string>{R"(x"y\z)", "NULL"}),
            R"({"x\"y\\z","NULL"})");
}

TEST(DbTextFormat, ArrayLiteralsWriteNullForMissingElements) {
  std::vector<std::optional<std::string>> xs{std::string{"a"}, std::nullopt,
                                             std::string{"{}"}};
  EXPECT_EQ(db::array_literal(xs), R"({"a",NULL,"{}"})");
}

TEST(DbTextFormat, ArrayLiteralsOfIntegersAreBare) {
  EXPECT_EQ(db::array_literal(std::vector<int64_t>{}), "{}");
  EXPECT_EQ(db::array_literal(std::vector<int64_t>{1, -2, 3000000000}),
            "{1,-2,3000000000}");
}

TEST(DbTextFormat, CopyFieldsEscapeBackslashTabAndLineBreaks) {
  std::string row = "1\t";
  db::append_copy_field(row, "a\\b\tc\nd\re");
  EXPECT_EQ(row, "1\ta\\\\b\\tc\\nd\\re");
  row.clear();
  db::append_copy_field(row, "plain text, \"quoted\" and {braces}");
  EXPECT_EQ(row, "plain text, \"quoted\" and {braces}");
  row.clear();
  db::append_copy_field(row, "");
  EXPECT_EQ(row, "");
}

TEST(DbTextFormat, ParametersRenderBooleansAndNulls) {
  EXPECT_EQ(db::to_param(true), db::param{"t"});
  EXPECT_EQ(db::to_param(false), db::param{"f"});
  EXPECT_EQ(db::to_param(std::optional<int>{}), std::nullopt);
  EXPECT_EQ(db::to_param(std::optional<int>{7}), db::param{"7"});
}
