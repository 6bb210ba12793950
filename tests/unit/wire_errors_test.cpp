// Table-driven: every class of bad input is rejected with decode_error and a
// message naming the problem.

#include "cmdbus/model/wire.hpp"

#include <gtest/gtest.h>

#include <limits>

using namespace cmdbus;

namespace {

enum class decoder { command, reply };

struct bad_input {
  const char* name;
  decoder which;
  std::string text;
  std::string message;
  decode_limits limits = {};
};

const std::string id = "3f1c2a9e-8b7d-4c6e-9f10-2b3c4d5e6f70";

/// A command message whose remaining members are `rest` (may be empty).
std::string cmd(const std::string& rest) {
  return R"({"domain":"d","command_type":"T","command_id":")" + id + "\""
         + (rest.empty() ? "" : "," + rest) + "}";
}

/// A reply message whose remaining members are `rest`.
std::string rep(const std::string& rest) {
  return R"({"command_id":")" + id + "\"" + (rest.empty() ? "" : "," + rest)
         + "}";
}

decode_limits max_bytes(size_t n) {
  decode_limits x;
  x.max_bytes = n;
  return x;
}

std::vector<bad_input> bad_inputs() {
  auto c = decoder::command;
  auto r = decoder::reply;
  std::string deep_data = R"({"domain":"d","command_type":"T","command_id":")"
                          + id + R"(","data":{"a":)" + std::string(100000, '[');
  return {
      // -- size and framing
      {"empty", c, "", "empty input"},
      {"empty_reply", r, "", "empty input"},
      {"whitespace_only", c, " \n",
       "invalid JSON at offset 2: The document is empty"},
      {"oversize", c, cmd(R"("data":{"pad":")" + std::string(200, 'x') + "\"}"),
       "message larger than 100 bytes", max_bytes(100)},
      {"nul_byte", c, std::string{"{\"domain\":\"d\0\"}", 15},
       "invalid JSON at offset 12: NUL byte"},
      // -- JSON syntax
      {"missing_comma", c, R"({"domain":"d" "command_type":"T"})",
       "invalid JSON at offset 14: Missing a comma or '}' after an object "
       "member"},
      {"truncated", c, R"({"domain":"d",)",
       "invalid JSON at offset 14: Missing a name for object member"},
      {"trailing_garbage", c, cmd("") + " x",
       "invalid JSON at offset 86: The document root must not be followed by "
       "other values"},
      {"nan", c, cmd(R"("data":{"x":NaN})"),
       "invalid JSON at offset 97: Invalid value"},
      {"infinity", r, rep(R"("outcome":"SUCCESS","result":Infinity)"),
       "invalid JSON at offset 82: Invalid value"},
      // -- encoding
      {"invalid_utf8_in_value", c, "{\"domain\":\"d\xff\"}",
       "invalid UTF-8 at offset 12"},
      {"invalid_utf8_in_key", c, "{\"do\xc3main\":\"d\"}",
       "invalid UTF-8 at offset 4"},
      {"invalid_utf8_in_data", c, cmd("\"data\":{\"k\":\"\x80\"}"),
       "invalid UTF-8 at offset 98"},
      {"overlong_utf8", c, cmd("\"data\":{\"k\":\"\xc0\xaf\"}"),
       "invalid UTF-8 at offset 98"},
      {"utf8_surrogate", c, cmd("\"reply_to\":\"\xed\xb0\x80\""),
       "invalid UTF-8 at offset 97"},
      {"lone_high_surrogate", c, cmd(R"("data":{"k":"\ud800"})"),
       "invalid JSON at offset 98: lone surrogate in \\u escape"},
      {"lone_low_surrogate", r, rep(R"("outcome":"SUCCESS","result":"\udc00")"),
       "invalid JSON at offset 90: lone surrogate in \\u escape"},
      {"escaped_nul", c, cmd(R"("reply_to":"q\u0000")"),
       "invalid JSON at offset 105: string contains \\u0000, which PostgreSQL "
       "jsonb cannot store"},
      // -- nesting
      {"deep_arrays", c, std::string(100000, '['),
       "nesting deeper than 64 levels"},
      {"deep_data", c, deep_data, "nesting deeper than 64 levels"},
      {"deep_result", r,
       rep(R"("outcome":"SUCCESS","result":)" + std::string(64, '[')
           + std::string(64, ']')),
       "nesting deeper than 64 levels"},
      // -- shape
      {"top_level_array", c, "[]",
       "message must be a JSON object, not an array"},
      {"top_level_string", r, R"("x")",
       "message must be a JSON object, not a string"},
      {"top_level_null", c, "null", "message must be a JSON object, not null"},
      {"top_level_number", r, "1",
       "message must be a JSON object, not a number"},
      {"missing_domain", c,
       R"({"command_type":"T","command_id":")" + id + "\"}",
       "missing field \"domain\""},
      {"missing_command_type", c,
       R"({"domain":"d","command_id":")" + id + "\"}",
       "missing field \"command_type\""},
      {"missing_command_id", c, R"({"domain":"d","command_type":"T"})",
       "missing field \"command_id\""},
      {"domain_null", c, R"({"domain":null,"command_type":"T"})",
       "field \"domain\" must be a string"},
      {"command_type_object", c, R"({"domain":"d","command_type":{}})",
       "field \"command_type\" must be a string"},
      {"command_id_number", c,
       R"({"domain":"d","command_type":"T","command_id":12})",
       "field \"command_id\" must be a string"},
      {"command_id_invalid", c,
       R"({"domain":"d","command_type":"T","command_id":"xyz"})",
       "field \"command_id\" is not a valid UUID: \"xyz\""},
      {"command_id_braces", c,
       R"({"domain":"d","command_type":"T","command_id":"{)" + id + "}\"}",
       "field \"command_id\" is not a valid UUID: \"{" + id + "}\""},
      {"command_id_long", c,
       R"({"domain":"d","command_type":"T","command_id":")"
           + std::string(100, 'a') + "\"}",
       "field \"command_id\" is not a valid UUID: \"" + std::string(40, 'a')
           + "\"..."},
      {"command_id_escapes", c,
       R"({"domain":"d","command_type":"T","command_id":"a\"\n"})",
       "field \"command_id\" is not a valid UUID: \"a\\\"\\u000a\""},
      {"correlation_id_number", c, cmd(R"("correlation_id":1)"),
       "field \"correlation_id\" must be a string or null"},
      {"correlation_id_invalid", c, cmd(R"("correlation_id":"")"),
       "field \"correlation_id\" is not a valid UUID: \"\""},
      {"data_array", c, cmd(R"("data":[1])"),
       "field \"data\" must be an object"},
      {"data_null", c, cmd(R"("data":null)"),
       "field \"data\" must be an object"},
      {"data_string", c, cmd(R"("data":"{}")"),
       "field \"data\" must be an object"},
      {"reply_to_number", c, cmd(R"("reply_to":5)"),
       "field \"reply_to\" must be a string or null"},
      // -- replies
      {"reply_missing_command_id", r, R"({"outcome":"SUCCESS"})",
       "missing field \"command_id\""},
      {"reply_missing_outcome", r, rep(""), "missing field \"outcome\""},
      {"reply_outcome_lower_case", r, rep(R"("outcome":"success")"),
       "field \"outcome\" must be \"SUCCESS\", \"FAILED\" or \"CANCELED\", not "
       "\"success\""},
      {"reply_outcome_number", r, rep(R"("outcome":1)"),
       "field \"outcome\" must be a string"},
      {"reply_error_code_number", r,
       rep(R"("outcome":"FAILED","error_code":7)"),
       "field \"error_code\" must be a string or null"},
      {"reply_reason_bool", r, rep(R"("outcome":"CANCELED","reason":true)"),
       "field \"reason\" must be a string or null"},
      {"reply_correlation_invalid", r,
       rep(R"("correlation_id":"nope","outcome":"SUCCESS")"),
       "field \"correlation_id\" is not a valid UUID: \"nope\""},
  };
}

void PrintTo(const bad_input& x, std::ostream* os) {
  *os << x.name;
}

class wire_errors : public testing::TestWithParam<bad_input> {};

TEST_P(wire_errors, rejects_with_a_clear_message) {
  const auto& x = GetParam();
  try {
    if (x.which == decoder::command)
      wire::decode_command(x.text, x.limits);
    else
      wire::decode_reply(x.text, x.limits);
    FAIL() << "decoded: " << x.name;
  } catch (const decode_error& e) {
    EXPECT_EQ(std::string{e.what()}, x.message);
  }
}

INSTANTIATE_TEST_SUITE_P(table, wire_errors, testing::ValuesIn(bad_inputs()),
                         [](const testing::TestParamInfo<bad_input>& info) {
                           return std::string{info.param.name};
                         });

TEST(wire_errors_misc, decode_error_is_a_command_bus_error) {
  try {
    wire::decode_command("{");
    FAIL();
  } catch (const command_bus_error& e) {
    EXPECT_NE(dynamic_cast<const decode_error*>(&e), nullptr);
  }
}

// Nesting is bounded by the limit alone, never by the stack: with no limit
// a command whose data nests a million levels decodes.
TEST(wire_errors_misc, deep_data_decodes_without_recursion_when_unlimited) {
  decode_limits unlimited;
  unlimited.max_depth = std::numeric_limits<size_t>::max();
  constexpr size_t n = 1000000;
  auto data = "{\"a\":" + std::string(n, '[') + std::string(n, ']') + "}";
  auto x = wire::decode_command(cmd("\"data\":" + data), unlimited);
  EXPECT_EQ(x.data.text(), data);
}

} // namespace
