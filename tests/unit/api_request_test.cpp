// The command API's request parsing (api/request.hpp) and tokens
// (api/tokens.hpp), without a server: a table of bad inputs, each refused
// with its status and a message that says what is wrong; good bodies read
// exactly (the payload as the client wrote it).

#include "api/request.hpp"

#include <gtest/gtest.h>

#include <string>

#include "api/tokens.hpp"

using namespace cmdbus;
using namespace cmdbus::api;
using namespace std::chrono_literals;

namespace {

struct refusal {
  int status = 0;
  std::string message;
};

template <class F>
refusal refused(F fn) {
  try {
    fn();
  } catch (const api_error& e) {
    return {e.status(), e.what()};
  }
  return {};
}

struct bad_body {
  std::string body;
  int status;
  /// A piece of the message the client gets.
  std::string says;
};

} // namespace

TEST(ApiRequest, BadSendBodiesAreRefusedWithAClearMessage) {
  const std::vector<bad_body> table{
    {"", 400, "not valid JSON"},
    {"{", 400, "not valid JSON"},
    {"{\"type\": \"A\",}", 400, "not valid JSON"},
    {"{\"type\": \"A\"} x", 400, "not valid JSON"},
    {"[]", 400, "must be a JSON object, not an array"},
    {"\"type\"", 400, "must be a JSON object, not a string"},
    {"null", 400, "must be a JSON object, not null"},
    {"{}", 400, "field \"type\" of the body is required"},
    {"{\"type\": \"\"}", 400, "field \"type\" of the body is required"},
    {"{\"type\": 5}", 400, "field \"type\" of the body must be a string"},
    {"{\"type\": \"" + std::string(256, 'x') + "\"}", 400, "longer than 255"},
    {"{\"type\": \"A\", \"typo\": 1}", 400, "unknown field \"typo\""},
    {"{\"type\": \"A\", \"type\": \"B\"}", 400, "\"type\" twice"},
    {"{\"type\": \"A\", \"data\": [1]}", 400,
     "\"data\" of the body must be "
     "an object"},
    {"{\"type\": \"A\", \"data\": \"{}\"}", 400, "must be an object"},
    {"{\"type\": \"A\", \"command_id\": \"nope\"}", 400, "is not a UUID"},
    {"{\"type\": \"A\", \"command_id\": "
     "\"00000000-0000-0000-0000-000000000000\"}",
     400, "nil UUID"},
    {"{\"type\": \"A\", \"correlation_id\": 7}", 400, "must be a string"},
    {"{\"type\": \"A\", \"reply_to\": \"bad name!\"}", 400, "\"reply_to\""},
    {"{\"type\": \"A\", \"reply_to\": \"\"}", 400, "\"reply_to\""},
    {"{\"type\": \"A\", \"max_attempts\": 0}", 400, "integer from 1 to 1000"},
    {"{\"type\": \"A\", \"max_attempts\": 2.5}", 400, "integer from 1"},
    {"{\"type\": \"A\", \"max_attempts\": \"3\"}", 400, "must be a number"},
    {"{\"type\": \"A\", \"max_attempts\": 99999999999999999999}", 400,
     "integer from 1"},
    {"{\"type\": \"A\", \"priority\": 1e3}", 400, "integer from"},
    {"{\"type\": \"A\", \"not_before\": \"tomorrow\"}", 400, "RFC 3339"},
    {"{\"type\": \"A\", \"delay\": \"soon\"}", 400, "not a duration"},
    {"{\"type\": \"A\", \"delay\": \"-5s\"}", 400, "not a duration"},
    {"{\"type\": \"A\", \"delay\": \"5s\", \"not_before\": "
     "\"2030-01-01T00:00:00Z\"}",
     400, "exclude each other"},
    {"{\"type\": \"A\\u0000\"}", 400, "not valid JSON"},
    {"{\"type\": \"\xff\"}", 400, "not valid JSON"},
    {std::string(40, '[') + std::string(40, ']'), 400, "not valid JSON"},
    {"{\"type\": \"A\", \"data\": {\"x\": \"" + std::string(300 * 1024, 'a')
       + "\"}}",
     413, "larger than"},
  };
  for (auto& row : table) {
    SCOPED_TRACE(row.body.substr(0, 80));
    auto r = refused([&] { parse_send_body("orders", row.body); });
    EXPECT_EQ(r.status, row.status);
    EXPECT_NE(r.message.find(row.says), std::string::npos) << r.message;
  }
}

TEST(ApiRequest, AGoodSendBodyIsReadAsWritten) {
  auto b = parse_send_body(
    "orders",
    R"({"type": "Ship", "data": {"amount": 1.10, "big": 123456789012345678901234567890, "n": {"a": [1, {"b": null}]}},
        "command_id": "11111111-1111-4111-8111-111111111111",
        "correlation_id": "22222222-2222-4222-8222-222222222222",
        "reply_to": "orders_replies", "max_attempts": 5, "priority": -3,
        "not_before": "2030-01-01T00:00:00Z"})");
  auto& r = b.request;
  EXPECT_TRUE(b.id_given);
  EXPECT_EQ(r.domain, "orders");
  EXPECT_EQ(r.command_type, "Ship");
  // Numbers keep their exact text.
  EXPECT_EQ(
    r.data.text(),
    R"({"amount":1.10,"big":123456789012345678901234567890,"n":{"a":[1,{"b":null}]}})");
  EXPECT_EQ(r.command_id.to_string(), "11111111-1111-4111-8111-111111111111");
  EXPECT_EQ(r.correlation_id->to_string(),
            "22222222-2222-4222-8222-222222222222");
  EXPECT_EQ(r.reply_to, "orders_replies");
  EXPECT_EQ(r.max_attempts, 5);
  EXPECT_EQ(r.priority, -3);
  EXPECT_EQ(format_timestamp(*r.not_before), "2030-01-01T00:00:00.000000Z");
  // Optional fields may be null or absent; an id is generated.
  auto minimal = parse_send_body("orders", R"({"type": "A", "data": null})");
  EXPECT_FALSE(minimal.id_given);
  EXPECT_FALSE(minimal.request.command_id.is_nil());
  EXPECT_EQ(minimal.request.data.text(), "{}");
  auto delayed = parse_send_body("orders", R"({"type": "A", "delay": "90s"})");
  ASSERT_TRUE(delayed.request.not_before);
  EXPECT_GT(*delayed.request.not_before, not_before_in(60s));
}

TEST(ApiRequest, BatchBodies) {
  auto b = parse_batch_body(
    R"({"name": "n", "custom_data": {"k": 1.0},
        "commands": [{"type": "A"}, {"type": "B", "data": {"x": 2.50}}]})");
  ASSERT_EQ(b.commands.size(), 2u);
  EXPECT_EQ(b.commands[1].command_type, "B");
  EXPECT_EQ(b.commands[1].data.text(), R"({"x":2.50})");
  EXPECT_EQ(b.custom_data->text(), R"({"k":1.0})");
  EXPECT_EQ(b.name, "n");
  const std::vector<bad_body> table{
    {"{}", 400, "\"commands\" of the body is required"},
    {"{\"commands\": []}", 400, "\"commands\" of the body is required"},
    {"{\"commands\": {}}", 400, "must be an array"},
    {"{\"commands\": [{\"type\": \"A\"}, 5]}", 400,
     "commands[1] must be a JSON object"},
    {"{\"commands\": [{\"type\": \"A\", \"x\": 1}]}", 400,
     "commands[0] has an unknown field \"x\""},
    {"{\"commands\": [{}]}", 400, "field \"type\" of commands[0]"},
    {"{\"batch_id\": \"x\", \"commands\": [{\"type\": \"A\"}]}", 400,
     "not a UUID"},
    {"{\"commands\": [" +
       [] {
         std::string s;
         for (int i = 0; i < 1001; ++i)
           s += std::string{i ? "," : ""} + "{\"type\":\"A\"}";
         return s;
       }()
       + "]}",
     400, "more than 1000"},
  };
  for (auto& row : table) {
    SCOPED_TRACE(row.body.substr(0, 80));
    auto r = refused([&] { parse_batch_body(row.body); });
    EXPECT_EQ(r.status, row.status);
    EXPECT_NE(r.message.find(row.says), std::string::npos) << r.message;
  }
}

TEST(ApiRequest, PathsAndWaits) {
  EXPECT_EQ(refused([] { check_domain("orders"); }).status, 0);
  // Strings owned by the list: a c_str() of a temporary would dangle.
  for (const std::string& d :
       {std::string{}, std::string{"a-b"}, std::string{"a b"},
        std::string{"x;drop"}, std::string(60, 'a')})
    EXPECT_EQ(refused([&] { check_domain(d); }).status, 400) << d;
  EXPECT_EQ(refused([] { parse_command_id("nope"); }).status, 400);
  EXPECT_EQ(parse_wait(std::nullopt), 15s);
  EXPECT_EQ(parse_wait("0"), 0ms);
  EXPECT_EQ(parse_wait("2"), 2s);
  EXPECT_EQ(parse_wait("500ms"), 500ms);
  EXPECT_EQ(parse_wait("30s"), 30s);
  for (auto w : {"31s", "1h", "-1s", "soon", "", "1e400", "nan"})
    EXPECT_EQ(refused([&] { parse_wait(std::string{w}); }).status, 400) << w;
}

TEST(ApiTokens, FormatAndDecisions) {
  auto store = token_store::parse("# tokens\n"
                                  "aaaaaaaaaaaaaaaaaaaa  orders, payments\n"
                                  "\n"
                                  "bbbbbbbbbbbbbbbbbbbb *;cccccccccccccccccccc "
                                  "audit",
                                  "test");
  EXPECT_EQ(store.size(), 3u);
  EXPECT_EQ(store.check("Bearer aaaaaaaaaaaaaaaaaaaa", "orders"),
            access::granted);
  EXPECT_EQ(store.check("bearer aaaaaaaaaaaaaaaaaaaa", "payments"),
            access::granted);
  EXPECT_EQ(store.check("Bearer aaaaaaaaaaaaaaaaaaaa", "audit"),
            access::forbidden);
  EXPECT_EQ(store.check("Bearer bbbbbbbbbbbbbbbbbbbb", "anything"),
            access::granted);
  EXPECT_EQ(store.check("Bearer cccccccccccccccccccc", "audit"),
            access::granted);
  EXPECT_EQ(store.check("", "orders"), access::missing);
  EXPECT_EQ(store.check("Basic aaaaaaaaaaaaaaaaaaaa", "orders"),
            access::missing);
  EXPECT_EQ(store.check("Bearer ", "orders"), access::missing);
  // A prefix, a longer token, one byte off: not ours.
  for (auto t : {"aaaaaaaaaaaaaaaaaaa", "aaaaaaaaaaaaaaaaaaaaa",
                 "aaaaaaaaaaaaaaaaaaab", "x"})
    EXPECT_EQ(store.check(std::string{"Bearer "} + t, "orders"),
              access::unknown)
      << t;
  // Malformed files are refused by entry number, never showing a token.
  for (auto text :
       {"", "# only a comment\n", "aaaaaaaaaaaaaaaaaaaa\n", "short orders\n",
        "aaaaaaaaaaaaaaaa\x01zzz orders\n", "aaaaaaaaaaaaaaaaaaaa bad-domain\n",
        "aaaaaaaaaaaaaaaaaaaa a\naaaaaaaaaaaaaaaaaaaa b\n"}) {
    try {
      token_store::parse(text, "tokens file t");
      ADD_FAILURE() << "accepted: " << text;
    } catch (const std::invalid_argument& e) {
      std::string message = e.what();
      EXPECT_NE(message.find("tokens file t"), std::string::npos) << message;
      EXPECT_EQ(message.find("aaaaaaaaaaaaaaaa"), std::string::npos) << message;
    }
  }
}
