#include "cmdbus/model/uuid.hpp"

#include <unordered_set>

#include <gtest/gtest.h>

using cmdbus::uuid;

namespace {

TEST(uuid, default_is_nil) {
  uuid x;
  EXPECT_TRUE(x.is_nil());
  EXPECT_EQ(x.to_string(), "00000000-0000-0000-0000-000000000000");
}

TEST(uuid, parses_canonical_lower_case) {
  auto x = uuid::parse("3f1c2a9e-8b7d-4c6e-9f10-2b3c4d5e6f70");
  ASSERT_TRUE(x);
  EXPECT_FALSE(x->is_nil());
  EXPECT_EQ(x->bytes()[0], 0x3f);
  EXPECT_EQ(x->bytes()[15], 0x70);
  EXPECT_EQ(x->to_string(), "3f1c2a9e-8b7d-4c6e-9f10-2b3c4d5e6f70");
}

TEST(uuid, accepts_upper_and_mixed_case_and_prints_lower_case) {
  auto x = uuid::parse("3F1C2A9E-8B7D-4C6E-9F10-2B3C4D5E6F70");
  auto y = uuid::parse("3f1C2a9E-8b7D-4c6E-9f10-2B3c4D5e6F70");
  ASSERT_TRUE(x);
  ASSERT_TRUE(y);
  EXPECT_EQ(*x, *y);
  EXPECT_EQ(x->to_string(), "3f1c2a9e-8b7d-4c6e-9f10-2b3c4d5e6f70");
}

TEST(uuid, rejects_everything_else) {
  const char* bad[] = {
      "",
      "3f1c2a9e-8b7d-4c6e-9f10-2b3c4d5e6f7",     // too short
      "3f1c2a9e-8b7d-4c6e-9f10-2b3c4d5e6f700",   // too long
      "3f1c2a9e8b7d4c6e9f102b3c4d5e6f70",        // no dashes
      "{3f1c2a9e-8b7d-4c6e-9f10-2b3c4d5e6f70}",  // braces
      "{3f1c2a9e-8b7d-4c6e-9f10-2b3c4d5e6f7}",   // braces, 36 chars
      "3f1c2a9e-8b7d-4c6e-9f10-2b3c4d5e6f7g",    // bad hex
      "3f1c2a9e 8b7d-4c6e-9f10-2b3c4d5e6f70",    // space for dash
      "3f1c2a9-e8b7d-4c6e-9f10-2b3c4d5e6f70",    // dash misplaced
      "3f1c2a9e-8b7d-4c6e-9f102-b3c4d5e6f70",    // dash misplaced
      "urn:uuid:3f1c2a9e-8b7d-4c6e-9f10-2b3c4d", // prefix
      " 3f1c2a9e-8b7d-4c6e-9f10-2b3c4d5e6f7",    // leading space
      "3f1c2a9e-8b7d-4c6e-9f10-2b3c4d5e6f\xc3\xa9",
  };
  for (auto text : bad)
    EXPECT_FALSE(uuid::parse(text)) << text;
  EXPECT_FALSE(uuid::parse(
      std::string_view{"3f1c2a9e-8b7d-4c6e-9f10-2b3c4d5e6f7\0", 36}));
}

TEST(uuid, random_is_version_4_variant_1) {
  for (int i = 0; i < 100; ++i) {
    auto x = uuid::random();
    EXPECT_EQ(x.bytes()[6] >> 4, 4);
    EXPECT_EQ(x.bytes()[8] & 0xc0, 0x80);
    auto text = x.to_string();
    EXPECT_EQ(text[14], '4');
    EXPECT_NE(text.find_first_of("89ab", 19), std::string::npos);
    EXPECT_EQ(uuid::parse(text), x);
  }
}

TEST(uuid, random_is_unique) {
  std::unordered_set<uuid> seen;
  for (int i = 0; i < 10000; ++i)
    EXPECT_TRUE(seen.insert(uuid::random()).second);
}

TEST(uuid, orders_and_hashes_by_bytes) {
  auto a = *uuid::parse("00000000-0000-0000-0000-000000000001");
  auto b = *uuid::parse("00000000-0000-0000-0000-000000000002");
  EXPECT_LT(a, b);
  EXPECT_NE(a, b);
  EXPECT_NE(std::hash<uuid>{}(a), std::hash<uuid>{}(b));
  EXPECT_EQ(std::hash<uuid>{}(a),
            std::hash<uuid>{}(*uuid::parse(a.to_string())));
}

} // namespace
