#include "cmdbus/model/json.hpp"

#include <gtest/gtest.h>

#include <limits>
#include <string>

#include "cmdbus/model/errors.hpp"

using cmdbus::decode_error;
using cmdbus::decode_limits;
using cmdbus::json;

namespace {

/// Returns the decode_error message of parsing `text`, or "" on success.
std::string parse_error(std::string_view text,
                        const decode_limits& limits = {}) {
  try {
    json::parse(text, limits);
  } catch (const decode_error& e) {
    return e.what();
  }
  return {};
}

TEST(json, default_is_null_and_object_is_empty) {
  EXPECT_EQ(json{}.text(), "null");
  EXPECT_TRUE(json{}.is_null());
  EXPECT_TRUE(json::null().is_null());
  EXPECT_EQ(json::object().text(), "{}");
  EXPECT_TRUE(json::object().is_object());
  EXPECT_FALSE(json::object().is_null());
}

TEST(json, parse_compacts_whitespace) {
  auto x = json::parse(" {\n \"a\" : [ 1 , 2 ,\t{ } ] , \"b\" : null }\r\n");
  EXPECT_EQ(x.text(), R"({"a":[1,2,{}],"b":null})");
  EXPECT_TRUE(x.is_object());
  EXPECT_EQ(x, json::parse(R"({"a":[1,2,{}],"b":null})"));
}

TEST(json, parse_accepts_any_top_level_value) {
  EXPECT_EQ(json::parse("null").text(), "null");
  EXPECT_TRUE(json::parse(" null ").is_null());
  EXPECT_EQ(json::parse("true").text(), "true");
  EXPECT_EQ(json::parse("false").text(), "false");
  EXPECT_EQ(json::parse("42").text(), "42");
  EXPECT_EQ(json::parse(R"("x")").text(), R"("x")");
  EXPECT_EQ(json::parse("[]").text(), "[]");
  EXPECT_FALSE(json::parse("[]").is_object());
}

TEST(json, parse_keeps_numbers_verbatim) {
  const char* numbers[] = {
      "0",        "-0",
      "1.0",      "1.50",
      "1E5",      "1e-5",
      "-2.5E+10", "12345678901234567890123",
      "0.1",      "3.141592653589793238462643383279",
  };
  for (auto n : numbers)
    EXPECT_EQ(json::parse(n).text(), n);
  EXPECT_EQ(json::parse("[1.0, 2]").text(), "[1.0,2]");
}

TEST(json, parse_normalises_strings) {
  // Escapes of printable characters become raw UTF-8; control characters,
  // quotes and backslashes stay escaped; '/' needs no escape.
  EXPECT_EQ(
      json::parse(R"("Z\u00fcrich \u2713 \/ \"q\" \\ \n\t\u0001")").text(),
      "\"Z\xc3\xbcrich \xe2\x9c\x93 / \\\"q\\\" \\\\ \\n\\t\\u0001\"");
  // A surrogate pair is one character.
  EXPECT_EQ(json::parse(R"("\ud83d\ude00")").text(), "\"\xf0\x9f\x98\x80\"");
  // Raw UTF-8 passes through.
  EXPECT_EQ(json::parse("\"\xf0\x9f\x98\x80\"").text(), "\"\xf0\x9f\x98\x80\"");
}

TEST(json, parse_keeps_duplicate_keys) {
  // Duplicates stay in the text; readers (Python json, jsonb) take the last.
  EXPECT_EQ(json::parse(R"({"a": 1, "a": 2})").text(), R"({"a":1,"a":2})");
}

TEST(json, parse_is_idempotent) {
  auto once =
      json::parse(R"( { "k" : [ "\u00e9" , 1.10 , { "n" : null } ] } )");
  EXPECT_EQ(json::parse(once.text()), once);
}

TEST(json, parse_rejects_invalid_json) {
  const std::pair<const char*, const char*> cases[] = {
      {"{\"a\":1 \"b\":2}", "invalid JSON at offset 7: Missing a comma or '}' "
                            "after an object member"},
      {"[1 2]", "invalid JSON at offset 3: Missing a comma or ']' after an "
                "array element"},
      {"{} x",
       "invalid JSON at offset 3: The document root must not be followed by "
       "other values"},
      {"{}{}",
       "invalid JSON at offset 2: The document root must not be followed by "
       "other values"},
      {"NaN", "invalid JSON at offset 0: Invalid value"},
      {"[Infinity]", "invalid JSON at offset 1: Invalid value"},
      {"[-Infinity]", "invalid JSON at offset 2: Invalid value"},
      {"[1,]", "invalid JSON at offset 3: Invalid value"},
      {"{\"a\":1,}",
       "invalid JSON at offset 7: Missing a name for object member"},
      {"{'a':1}", "invalid JSON at offset 1: Missing a name for object member"},
      {"{a:1}", "invalid JSON at offset 1: Missing a name for object member"},
      {"{\"a\" 1}", "invalid JSON at offset 5: Missing a colon after a name of "
                    "object member"},
      {"// c\n{}", "invalid JSON at offset 0: Invalid value"},
      {"01", "invalid JSON at offset 1: The document root must not be followed "
             "by other values"},
      {"1.", "invalid JSON at offset 2: Miss fraction part in number"},
      {".5", "invalid JSON at offset 0: Invalid value"},
      {"+1", "invalid JSON at offset 0: Invalid value"},
      {"1e", "invalid JSON at offset 2: Miss exponent in number"},
      {"1e400",
       "invalid JSON at offset 0: Number too big to be stored in double"},
      {"tru", "invalid JSON at offset 3: Invalid value"},
      {"\"abc", "invalid JSON at offset 4: Missing a closing quotation mark in "
                "string"},
      {"\"\\x\"",
       "invalid JSON at offset 1: Invalid escape character in string"},
      {"\"\\u12G4\"", "invalid JSON at offset 1: Incorrect hex digit after \\u "
                      "escape in string"},
      {"\"a\tb\"",
       "invalid JSON at offset 2: unescaped control character in string"},
      {"\xef\xbb\xbf{}", "invalid JSON at offset 0: Invalid value"},
      {"   ", "invalid JSON at offset 3: The document is empty"},
  };
  for (auto& [text, msg] : cases)
    EXPECT_EQ(parse_error(text), msg) << text;
}

TEST(json, parse_rejects_what_jsonb_cannot_store) {
  EXPECT_EQ(parse_error(R"("a\u0000b")"),
            "invalid JSON at offset 10: string contains \\u0000, which "
            "PostgreSQL jsonb cannot store");
  EXPECT_EQ(parse_error(R"({"\u0000":1})"),
            "invalid JSON at offset 9: string contains \\u0000, which "
            "PostgreSQL jsonb cannot store");
}

TEST(json, parse_rejects_lone_surrogates) {
  EXPECT_EQ(parse_error(R"("\ud800")"),
            "invalid JSON at offset 1: lone surrogate in \\u escape");
  EXPECT_EQ(parse_error(R"("\ud800\u0041")"),
            "invalid JSON at offset 1: lone surrogate in \\u escape");
  EXPECT_EQ(parse_error(R"(["\udc00"])"),
            "invalid JSON at offset 9: lone surrogate in \\u escape");
  EXPECT_EQ(parse_error(R"("\ude00\ud83d")"),
            "invalid JSON at offset 7: lone surrogate in \\u escape");
}

TEST(json, parse_rejects_invalid_utf8) {
  const std::pair<std::string, const char*> cases[] = {
      {"\"\xff\"", "invalid UTF-8 at offset 1"},
      {"\"ab\x80\"", "invalid UTF-8 at offset 3"},
      {"\"\xc3\"", "invalid UTF-8 at offset 1"},             // truncated
      {"\"\xc0\xaf\"", "invalid UTF-8 at offset 1"},         // overlong '/'
      {"\"\xe0\x80\xaf\"", "invalid UTF-8 at offset 1"},     // overlong
      {"\"\xf0\x80\x80\xaf\"", "invalid UTF-8 at offset 1"}, // overlong
      {"\"\xed\xa0\x80\"", "invalid UTF-8 at offset 1"},     // surrogate
      {"\"\xf4\x90\x80\x80\"", "invalid UTF-8 at offset 1"}, // > U+10FFFF
      {"{\"k\xfe\":1}", "invalid UTF-8 at offset 3"},        // in a key
  };
  for (auto& [text, msg] : cases)
    EXPECT_EQ(parse_error(text), msg) << text;
  // Outside strings, any non-ASCII byte is a syntax error.
  EXPECT_EQ(parse_error("\xc3\xa9"), "invalid JSON at offset 0: Invalid value");
}

TEST(json, parse_rejects_empty_input_and_nul_bytes) {
  EXPECT_EQ(parse_error(""), "empty input");
  EXPECT_EQ(parse_error(std::string_view{"{}\0x", 4}),
            "invalid JSON at offset 2: NUL byte");
  EXPECT_EQ(parse_error(std::string_view{"\"a\0\"", 4}),
            "invalid JSON at offset 2: NUL byte");
}

TEST(json, parse_limits_depth) {
  auto nest = [](size_t n) {
    return std::string(n, '[') + std::string(n, ']');
  };
  EXPECT_EQ(json::parse(nest(64)).text(), nest(64));
  EXPECT_EQ(parse_error(nest(65)), "nesting deeper than 64 levels");
  EXPECT_EQ(parse_error(std::string(100000, '[')),
            "nesting deeper than 64 levels");
  EXPECT_EQ(parse_error(nest(100000)), "nesting deeper than 64 levels");
  std::string objects;
  for (int i = 0; i < 100000; ++i)
    objects += "{\"a\":";
  EXPECT_EQ(parse_error(objects), "nesting deeper than 64 levels");
  decode_limits shallow;
  shallow.max_depth = 2;
  EXPECT_EQ(json::parse(R"({"a":[1]})", shallow).text(), R"({"a":[1]})");
  EXPECT_EQ(parse_error(R"({"a":[{}]})", shallow),
            "nesting deeper than 2 levels");
  shallow.max_depth = 0;
  EXPECT_EQ(json::parse("1", shallow).text(), "1");
  EXPECT_EQ(parse_error("[]", shallow), "nesting deeper than 0 levels");
}

// The depth limit is a policy, not what keeps the stack safe: the reader
// never recurses, so without any limit a million levels parse (a recursive
// reader overflows an 8 MiB stack with far fewer and crashes the process).
TEST(json, parse_does_not_recurse_even_without_a_depth_limit) {
  decode_limits unlimited;
  unlimited.max_depth = std::numeric_limits<size_t>::max();
  constexpr size_t n = 1000000;
  auto arrays = std::string(n, '[') + std::string(n, ']');
  EXPECT_EQ(json::parse(arrays, unlimited).text(), arrays);
  std::string objects;
  for (size_t i = 0; i < n; ++i)
    objects += "{\"a\":";
  objects += "1" + std::string(n, '}');
  EXPECT_EQ(json::parse(objects, unlimited).text(), objects);
}

TEST(json, parse_limits_size) {
  decode_limits small;
  small.max_bytes = 10;
  EXPECT_EQ(json::parse("[1,2,3,44]", small).text(), "[1,2,3,44]");
  EXPECT_EQ(parse_error("[1,2,3,444]", small), "message larger than 10 bytes");
  EXPECT_EQ(parse_error(std::string(1000, ' '), small),
            "message larger than 10 bytes");
}

} // namespace

TEST(json, to_valid_text_replaces_what_postgresql_cannot_store) {
  using cmdbus::to_valid_text;
  const std::string fffd = "\xef\xbf\xbd";
  EXPECT_EQ(to_valid_text("plain ascii"), "plain ascii");
  EXPECT_EQ(to_valid_text("caf\xc3\xa9 \xf0\x9f\x98\x80"),
            "caf\xc3\xa9 \xf0\x9f\x98\x80");
  EXPECT_EQ(to_valid_text(std::string_view{"a\0b", 3}), "a" + fffd + "b");
  // A lone continuation byte, a truncated sequence, an overlong form and a
  // surrogate each become one replacement per byte.
  EXPECT_EQ(to_valid_text("x\x80y"), "x" + fffd + "y");
  EXPECT_EQ(to_valid_text("x\xe2\x82"), "x" + fffd + fffd);
  EXPECT_EQ(to_valid_text("\xc0\xaf"), fffd + fffd);
  EXPECT_EQ(to_valid_text("\xed\xa0\x80"), fffd + fffd + fffd);
  EXPECT_EQ(to_valid_text(""), "");
}
