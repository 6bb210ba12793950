#include "cmdbus/model/wire.hpp"

#include <gtest/gtest.h>

#include "fixture.hpp"

using namespace cmdbus;
using cmdbus::test::wire_fixture;

namespace {

const uuid command_id = *uuid::parse("3f1c2a9e-8b7d-4c6e-9f10-2b3c4d5e6f70");
const uuid correlation_id =
    *uuid::parse("a1b2c3d4-e5f6-4a7b-8c9d-0e1f2a3b4c5d");

command debit(std::string data) {
  command x;
  x.domain = "payments";
  x.command_type = "DebitAccount";
  x.command_id = command_id;
  x.correlation_id = correlation_id;
  x.data = json::parse(data);
  return x;
}

/// The data of command_reply_to.json, as a caller would write it.
constexpr const char* rich_data = R"({
  "account_id": "ACC-1", "amount": 10.5,
  "memo": "Z\u00fcrich \u2713 \"quoted\"\n\\path/x\u001f",
  "tags": ["a", "b"], "nested": {"x": null, "y": true, "z": -0.0015}})";

reply make_reply(reply_outcome outcome) {
  reply x;
  x.command_id = command_id;
  x.correlation_id = correlation_id;
  x.outcome = outcome;
  return x;
}

reply failed_reply() {
  auto x = make_reply(reply_outcome::failed);
  x.result = json::parse(R"({"balance":"5.00","required":"10.50"})");
  x.error_code = "INSUFFICIENT_FUNDS";
  x.error_message = "balance 5.00 is below 10.50";
  return x;
}

// -- commands: golden encodings -----------------------------------------------

TEST(wire_command, encodes_with_reply_to) {
  auto x = debit(rich_data);
  x.reply_to = "payments__replies";
  EXPECT_EQ(wire::encode_command(x), wire_fixture("command_reply_to.json"));
}

TEST(wire_command, encodes_without_reply_to_key_when_unset) {
  auto x = debit(R"({"account_id": "ACC-2", "amount": 25})");
  auto text = wire::encode_command(x);
  EXPECT_EQ(text, wire_fixture("command_no_reply_to.json"));
  EXPECT_EQ(text.find("reply_to"), std::string::npos);
}

TEST(wire_command, carries_a_priority_only_when_set) {
  // Without a priority the message is byte for byte the golden one.
  auto x = debit(R"({"account_id": "ACC-2", "amount": 25})");
  EXPECT_EQ(wire::encode_command(x), wire_fixture("command_no_reply_to.json"));
  x.priority = -7;
  auto text = wire::encode_command(x);
  EXPECT_NE(text.find(R"(,"priority":-7})"), std::string::npos) << text;
  EXPECT_EQ(wire::decode_command(text), x);
  x.priority.reset();
  EXPECT_EQ(wire::decode_command(wire::encode_command(x)).priority,
            std::optional<int>{});
}

TEST(wire_command, reads_an_odd_priority_as_none) {
  // The member is advisory: a value that is not an int never fails a
  // command.
  auto base = wire::encode_command(debit("{}"));
  base.pop_back();
  for (const char* value :
       {R"("high")", "1.5", "1e3", "99999999999", "null", "true", "[1]"}) {
    auto x = wire::decode_command(base + R"(,"priority":)" + value + "}");
    EXPECT_FALSE(x.priority.has_value()) << value;
  }
  EXPECT_EQ(wire::decode_command(base + R"(,"priority":42})").priority, 42);
}

TEST(wire_command, encodes_unset_correlation_id_as_null) {
  auto x = debit("{}");
  x.correlation_id.reset();
  EXPECT_EQ(wire::encode_command(x),
            wire_fixture("command_null_correlation.json"));
}

TEST(wire_command, encodes_a_generated_correlation_id) {
  // The bus generates the id (and stores the same in the command row); the
  // message carries exactly that id.
  auto generated = uuid::random();
  auto x = debit(R"({"amount":1})");
  x.correlation_id = generated;
  x.reply_to = "payments__replies";
  auto expected = wire_fixture("command_generated_correlation.json");
  const std::string placeholder = "9b2f0c4e-5d7a-4e1b-8c3f-2a6d9e8b7c10";
  expected.replace(expected.find(placeholder), placeholder.size(),
                   generated.to_string());
  auto text = wire::encode_command(x);
  EXPECT_EQ(text, expected);
  auto back = wire::decode_command(text);
  ASSERT_TRUE(back.correlation_id);
  EXPECT_EQ(*back.correlation_id, generated);
  EXPECT_EQ(back.correlation_id->bytes()[6] >> 4, 4);
}

// -- commands: decoding and round trips ---------------------------------------

TEST(wire_command, round_trips_every_fixture) {
  for (auto name : {"command_reply_to.json", "command_no_reply_to.json",
                    "command_null_correlation.json",
                    "command_generated_correlation.json"}) {
    auto text = wire_fixture(name);
    auto x = wire::decode_command(text);
    EXPECT_EQ(wire::encode_command(x), text) << name;
    EXPECT_EQ(wire::decode_command(wire::encode_command(x)), x) << name;
  }
}

TEST(wire_command, decodes_fields) {
  auto x = wire::decode_command(wire_fixture("command_reply_to.json"));
  EXPECT_EQ(x.domain, "payments");
  EXPECT_EQ(x.command_type, "DebitAccount");
  EXPECT_EQ(x.command_id, command_id);
  EXPECT_EQ(x.correlation_id, correlation_id);
  EXPECT_EQ(x.reply_to, "payments__replies");
  EXPECT_EQ(x.data, json::parse(rich_data));
  auto y = wire::decode_command(wire_fixture("command_null_correlation.json"));
  EXPECT_FALSE(y.correlation_id);
  EXPECT_FALSE(y.reply_to);
  EXPECT_EQ(y.data, json::object());
}

TEST(wire_command, decodes_what_the_reference_sends) {
  // Python's json.dumps: spaces, ASCII escapes; same value as ours.
  auto x = wire::decode_command(wire_fixture("python_command.json"));
  auto expected = debit(rich_data);
  expected.reply_to = "payments__replies";
  EXPECT_EQ(x, expected);
  EXPECT_EQ(wire::encode_command(x), wire_fixture("command_reply_to.json"));
  auto y =
      wire::decode_command(wire_fixture("python_command_no_reply_to.json"));
  EXPECT_FALSE(y.reply_to);
  EXPECT_EQ(wire::encode_command(y), wire_fixture("command_no_reply_to.json"));
}

TEST(wire_command, decodes_what_pgmq_returns) {
  // jsonb output: keys reordered, spaces after ':' and ','.
  auto x = wire::decode_command(wire_fixture("pgmq_command.json"));
  EXPECT_EQ(x.domain, "payments");
  EXPECT_EQ(x.command_type, "DebitAccount");
  EXPECT_EQ(x.command_id, command_id);
  EXPECT_EQ(x.correlation_id, correlation_id);
  EXPECT_EQ(x.reply_to, "payments__replies");
  EXPECT_EQ(x.data.text(),
            "{\"memo\":\"Z\xc3\xbcrich \xe2\x9c\x93 \\\"quoted\\\"\\n\\\\path"
            "/x\\u001F\",\"tags\":[\"a\",\"b\"],\"amount\":10.5,\"nested\":"
            "{\"x\":null,\"y\":true,\"z\":-0.0015},\"account_id\":\"ACC-1\"}");
}

TEST(wire_command, missing_data_is_an_empty_object) {
  auto x =
      wire::decode_command(R"({"domain":"d","command_type":"T","command_id":")"
                           + command_id.to_string() + R"("})");
  EXPECT_EQ(x.data, json::object());
  EXPECT_FALSE(x.correlation_id);
  EXPECT_FALSE(x.reply_to);
}

TEST(wire_command, null_or_empty_reply_to_is_unset) {
  auto base = R"({"domain":"d","command_type":"T","command_id":")"
              + command_id.to_string() + "\"";
  EXPECT_FALSE(wire::decode_command(base + R"(,"reply_to":null})").reply_to);
  EXPECT_FALSE(wire::decode_command(base + R"(,"reply_to":""})").reply_to);
  EXPECT_EQ(wire::decode_command(base + R"(,"reply_to":"q"})").reply_to, "q");
}

TEST(wire_command, ignores_unknown_keys_and_takes_the_last_duplicate) {
  auto x = wire::decode_command(
      R"({"type":"old","created_at":"2020-01-01","domain":"a","domain":"b",)"
      R"("command_type":"T","command_id":")"
      + command_id.to_string() + R"(","data":{"k":1},"data":{"k":2}})");
  EXPECT_EQ(x.domain, "b");
  EXPECT_EQ(x.data.text(), R"({"k":2})");
}

TEST(wire_command, accepts_upper_case_uuids) {
  auto x = wire::decode_command(
      R"({"domain":"d","command_type":"T",)"
      R"("command_id":"3F1C2A9E-8B7D-4C6E-9F10-2B3C4D5E6F70"})");
  EXPECT_EQ(x.command_id, command_id);
}

TEST(wire_command, encoder_rejects_bad_input) {
  auto x = debit("{}");
  x.domain = "bad\xff";
  EXPECT_THROW(wire::encode_command(x), std::invalid_argument);
  auto y = debit("{}");
  y.data = json::parse("[1]");
  EXPECT_THROW(wire::encode_command(y), std::invalid_argument);
  auto z = debit("{}");
  z.reply_to = std::string{"\xed\xa0\x80"};
  EXPECT_THROW(wire::encode_command(z), std::invalid_argument);
}

TEST(wire_command, encoder_escapes_strings) {
  auto x = debit("{}");
  x.command_type = "a\"b\\c\n\x01/\xc3\xa9";
  auto text = wire::encode_command(x);
  EXPECT_NE(text.find(R"("command_type":"a\"b\\c\n\u0001/)"
                      "\xc3\xa9\""),
            std::string::npos)
      << text;
  EXPECT_EQ(wire::decode_command(text), x);
}

// -- replies: golden encodings ------------------------------------------------

TEST(wire_reply, encodes_success_with_result) {
  auto x = make_reply(reply_outcome::success);
  x.result = json::parse(R"({"balance": "89.50", "ledger_entry": 42})");
  EXPECT_EQ(wire::encode_reply(x), wire_fixture("reply_success.json"));
}

TEST(wire_reply, encodes_success_with_null_result) {
  auto x = make_reply(reply_outcome::success);
  EXPECT_EQ(wire::encode_reply(x), wire_fixture("reply_success_null.json"));
}

TEST(wire_reply, encodes_business_rule_failure) {
  EXPECT_EQ(wire::encode_reply(failed_reply()),
            wire_fixture("reply_failed.json"));
}

TEST(wire_reply, failure_without_details_gets_empty_details) {
  auto x = failed_reply();
  x.result = json::null();
  auto text = wire::encode_reply(x);
  EXPECT_NE(text.find(R"("error_details":{})"), std::string::npos) << text;
  x.result = json::parse("[1]");
  EXPECT_EQ(wire::encode_reply(x), text);
}

TEST(wire_reply, encodes_cancel_with_reason) {
  auto x = make_reply(reply_outcome::canceled);
  x.reason = "operator: duplicate payment";
  EXPECT_EQ(wire::encode_reply(x), wire_fixture("reply_canceled.json"));
}

// -- replies: decoding and round trips ----------------------------------------

TEST(wire_reply, round_trips_every_fixture) {
  for (auto name : {"reply_success.json", "reply_success_null.json",
                    "reply_failed.json", "reply_canceled.json"}) {
    auto text = wire_fixture(name);
    auto x = wire::decode_reply(text);
    EXPECT_EQ(wire::encode_reply(x), text) << name;
    EXPECT_EQ(wire::decode_reply(wire::encode_reply(x)), x) << name;
  }
}

TEST(wire_reply, decodes_failure_details_and_errors) {
  auto x = wire::decode_reply(wire_fixture("reply_failed.json"));
  EXPECT_EQ(x, failed_reply());
  EXPECT_EQ(x.result.text(), R"({"balance":"5.00","required":"10.50"})");
  EXPECT_EQ(x.error_code, "INSUFFICIENT_FUNDS");
  EXPECT_EQ(x.error_message, "balance 5.00 is below 10.50");
}

TEST(wire_reply, decodes_what_the_reference_sends) {
  auto success = wire::decode_reply(wire_fixture("python_reply_success.json"));
  EXPECT_EQ(success.outcome, reply_outcome::success);
  EXPECT_EQ(success.result.text(), R"({"balance":"89.50","ledger_entry":42})");
  EXPECT_FALSE(success.error_code);
  EXPECT_EQ(wire::encode_reply(success), wire_fixture("reply_success.json"));

  auto null_result =
      wire::decode_reply(wire_fixture("python_reply_success_null.json"));
  EXPECT_TRUE(null_result.result.is_null());
  EXPECT_FALSE(null_result.correlation_id);

  // The reference nests the error fields in `result` only.
  auto failed = wire::decode_reply(wire_fixture("python_reply_failed.json"));
  EXPECT_EQ(failed, failed_reply());
  EXPECT_EQ(wire::encode_reply(failed), wire_fixture("reply_failed.json"));

  auto canceled =
      wire::decode_reply(wire_fixture("python_reply_canceled.json"));
  EXPECT_EQ(canceled.outcome, reply_outcome::canceled);
  EXPECT_EQ(canceled.reason, "operator: duplicate payment");
  EXPECT_TRUE(canceled.result.is_null());
  EXPECT_EQ(wire::encode_reply(canceled), wire_fixture("reply_canceled.json"));
}

TEST(wire_reply, decodes_what_the_java_port_sends) {
  // `data` instead of `result`, error fields at top level.
  auto success = wire::decode_reply(wire_fixture("java_reply_success.json"));
  EXPECT_EQ(success.result.text(), R"({"balance":"89.50","ledger_entry":42})");
  EXPECT_EQ(wire::encode_reply(success), wire_fixture("reply_success.json"));
  auto failed = wire::decode_reply(wire_fixture("java_reply_failed.json"));
  EXPECT_EQ(failed, failed_reply());
  EXPECT_EQ(wire::encode_reply(failed), wire_fixture("reply_failed.json"));
}

TEST(wire_reply, top_level_errors_win_over_nested_ones) {
  auto x = wire::decode_reply(
      R"({"command_id":")" + command_id.to_string()
      + R"(","outcome":"FAILED","error_code":"TOP","result":)"
        R"({"error_code":"NESTED","error_message":"nested message"}})");
  EXPECT_EQ(x.error_code, "TOP");
  EXPECT_EQ(x.error_message, "nested message");
  // No error_details: the whole result object is the details.
  EXPECT_EQ(x.result.text(),
            R"({"error_code":"NESTED","error_message":"nested message"})");
}

TEST(wire_reply, result_wins_over_data_unless_null) {
  auto base = R"({"command_id":")" + command_id.to_string()
              + R"(","outcome":"SUCCESS")";
  EXPECT_EQ(wire::decode_reply(base + R"(,"result":1,"data":2})").result.text(),
            "1");
  EXPECT_EQ(
      wire::decode_reply(base + R"(,"result":null,"data":2})").result.text(),
      "2");
  EXPECT_TRUE(wire::decode_reply(base + "}").result.is_null());
}

TEST(wire_reply, keeps_fields_the_outcome_does_not_carry) {
  auto x = make_reply(reply_outcome::success);
  x.reason = "r";
  x.error_code = "E";
  auto text = wire::encode_reply(x);
  EXPECT_EQ(wire::decode_reply(text), x) << text;
  auto y = make_reply(reply_outcome::canceled);
  y.result = json::parse("[1]");
  y.error_message = "m";
  text = wire::encode_reply(y);
  EXPECT_EQ(text, R"({"command_id":")" + command_id.to_string()
                      + R"(","correlation_id":")" + correlation_id.to_string()
                      + R"(","outcome":"CANCELED","reason":null,"result":[1],)"
                        R"("error_message":"m"})");
  EXPECT_EQ(wire::decode_reply(text), y);
}

} // namespace

TEST(wire_sent_details, matches_the_bulk_send_audit) {
  auto cid = uuid::parse("7d0f3b1e-2c4a-4d5e-8f60-718293a4b5c6");
  auto bid = uuid::parse("0a1b2c3d-4e5f-4061-8273-8495a6b7c8d9");
  ASSERT_TRUE(cid && bid);
  EXPECT_EQ(
      wire::encode_sent_details("Debit", cid, std::nullopt, 42, std::nullopt),
      R"({"command_type":"Debit","correlation_id":"7d0f3b1e-2c4a-4d5e-8f60-718293a4b5c6",)"
      R"("reply_to":null,"msg_id":42})");
  EXPECT_EQ(
      wire::encode_sent_details("T\"\t\\", std::nullopt,
                                std::string{"q__replies"}, 9007199254740993,
                                bid),
      R"({"command_type":"T\"\t\\","correlation_id":null,"reply_to":"q__replies",)"
      R"("msg_id":9007199254740993,"batch_id":"0a1b2c3d-4e5f-4061-8273-8495a6b7c8d9"})");
  EXPECT_THROW(
      wire::encode_sent_details("bad\xff", cid, std::nullopt, 1, std::nullopt),
      std::invalid_argument);
}
