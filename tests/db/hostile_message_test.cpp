// Hostile command messages put on a command queue with pgmq.send, read by
// a real worker: not a JSON object, no usable command id, ill-typed or
// missing fields, a type without a handler, another domain's command id.
// Each ends archived on receive (audit RECEIVE_SKIPPED when it names a
// command id of another domain or none at all), archived with its command
// in the troubleshooting queue (audit MOVED_TO_TSQ), or, when it is a valid
// command after all, completed; the worker keeps processing good commands
// (the fixture: tests/support/hostile_input.hpp). State is checked with
// SQL.

#include <gtest/gtest.h>

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "tests/support/hostile_input.hpp"

using namespace cmdbus;
using namespace cmdbus::test;

TEST_F(HostileInput, NotAnObjectOrNoUsableCommandIdIsArchivedWithoutAudit) {
  // Not an object (SQL NULL too), then objects without a usable command id.
  // clang-format off
  std::vector<opt_str> messages = {
    "[1,2]", R"("text")", "42", "null", "true", std::nullopt,
    "{}", R"({"domain":"x","command_type":"Ok"})", R"({"command_id":42})",
    R"({"command_id":null})", R"({"command_id":{"x":1}})",
    R"({"command_id":""})", R"({"command_id":"not-a-uuid"})",
    fill(R"({"command_id":" $ID"})", uuid::random())};
  // clang-format on
  messages.push_back(R"({"command_id":)" + jstr(nasty) + "}");
  std::vector<int64_t> ids;
  good();
  for (auto& m : messages) {
    ids.push_back(put(m));
    good();
  }
  run();
  for (size_t i = 0; i < messages.size(); ++i)
    EXPECT_TRUE(archived_as(ids[i], messages[i]))
        << "message " << messages[i].value_or("SQL NULL");
  EXPECT_EQ(skipped_audits(), 0);
  EXPECT_EQ(w_->stats().rejected, static_cast<int64_t>(messages.size()));
}

TEST_F(HostileInput, IllTypedFieldsOfAKnownCommandMoveItToTsq) {
  // Each message names its own command row; `why` is the stored error
  // message, or empty where the message is a valid command after all.
  struct hostile_case {
    const char* name;
    std::string message;
    std::string why;
  };
  // clang-format off
  std::vector<hostile_case> cases = {
    {"no_domain", with("domain"), R"(missing field "domain")"},
    {"domain_number", with("domain", "7"), R"(field "domain" must be a string)"},
    {"domain_of_another", with("domain", R"("other")"), not_ours("$D")},
    {"no_command_type", with("command_type"), R"(missing field "command_type")"},
    {"command_type_number", with("command_type", "42"), R"(field "command_type" must be a string)"},
    {"command_type_null", with("command_type", "null"), R"(field "command_type" must be a string)"},
    // PostgreSQL's uuid syntax, which claimed the row, is wider than ours.
    {"command_id_braced", with("command_id", R"("{$ID}")"), R"(field "command_id" is not a valid UUID: "{$ID}")"},
    {"command_id_no_hyphens", with("command_id", R"("$HEX")"), R"(field "command_id" is not a valid UUID: "$HEX")"},
    {"data_array", with("data", "[1]"), R"(field "data" must be an object)"},
    {"data_string", with("data", R"("{}")"), R"(field "data" must be an object)"},
    {"data_null", with("data", "null"), R"(field "data" must be an object)"},
    {"data_number", with("data", "1"), R"(field "data" must be an object)"},
    {"correlation_id_number", with("correlation_id", "5"), R"(field "correlation_id" must be a string or null)"},
    {"correlation_id_object", with("correlation_id", "{}"), R"(field "correlation_id" must be a string or null)"},
    {"correlation_id_not_uuid", with("correlation_id", R"("nope")"), R"(field "correlation_id" is not a valid UUID: "nope")"},
    {"reply_to_number", with("reply_to", "5"), R"(field "reply_to" must be a string or null)"},
    {"reply_to_array", with("reply_to", R"(["q"])"), R"(field "reply_to" must be a string or null)"},
    {"reply_to_not_a_queue_name", with("reply_to", R"("no such/queue")"), R"(field "reply_to" may contain only ASCII letters, digits and underscores)"},
    {"reply_to_too_long", with("reply_to", "\"" + std::string(48, 'q') + "\""), R"(field "reply_to" is longer than 47 characters)"},
    // Valid after all.
    {"correlation_id_null", with("correlation_id", "null"), ""},
    {"reply_to_null", with("reply_to", "null"), ""},
    {"reply_to_empty", with("reply_to", R"("")"), ""},
    {"no_data", with(), ""},
    {"unknown_members", with("headers", R"({"x":[1]})"), ""},
    {"command_id_upper_case", with("command_id", R"("$UID")"), ""},
  };
  // clang-format on
  std::vector<std::pair<uuid, int64_t>> sent;
  good();
  for (auto& c : cases) {
    auto id = row();
    sent.emplace_back(id, put(fill(c.message, id)));
    good();
  }
  run();
  for (size_t i = 0; i < cases.size(); ++i) {
    SCOPED_TRACE(cases[i].name);
    auto [id, msg_id] = sent[i];
    if (cases[i].why.empty())
      expect_completed(msg_id, id);
    else
      expect_invalid_message(msg_id, fill(cases[i].message, id), id,
                             fill(cases[i].why, id));
  }
}

TEST_F(HostileInput, TypeWithoutHandlerIsExhaustedIntoTsq) {
  // A row of an unhandled type, and an "Ok" row whose message names one.
  auto row_type = row("Nope", 1);
  auto message_type = row("Ok", 1);
  auto text = with("command_type", R"("Nope")");
  good();
  auto m1 = put(fill(text, row_type));
  good();
  auto m2 = put(fill(text, message_type));
  good();
  run();
  for (auto [id, msg_id] : {std::pair{row_type, m1}, {message_type, m2}}) {
    EXPECT_TRUE(archived_as(msg_id, fill(text, id)));
    EXPECT_EQ(column(id, "status"), tsq);
    EXPECT_EQ(events(id), (strings{"SENT", "RECEIVED", "MOVED_TO_TSQ"}));
    EXPECT_EQ(detail(id, "MOVED_TO_TSQ", "reason"), opt_str{"EXHAUSTED"});
    EXPECT_EQ(detail(id, "MOVED_TO_TSQ", "error_code"),
              opt_str{"HandlerNotFoundError"});
    EXPECT_EQ(column(id, "last_error_msg"),
              opt_str{"no handler registered for " + d + "/Nope"});
  }
}

TEST_F(HostileInput, CommandIdOfAnotherDomainIsSkippedAndLeavesItAlone) {
  auto other = test::unique_name("hostile");
  // Two commands of the other domain, with their own messages on its queue;
  // on ours a message for each (naming our domain, then theirs), and one
  // for our own command naming theirs (which must not reach their handler).
  // The ids differ, so that no read sees two messages of one command.
  auto a_theirs = env_.bus.send(request(other, "Ok")).command_id;
  auto b_theirs = env_.bus.send(request(other, "Ok")).command_id;
  auto mine = row();
  auto naming_theirs = with("domain", "\"" + other + "\"");
  good();
  good(other);
  auto m1 = put(fill(with(), a_theirs));
  good();
  auto m2 = put(fill(naming_theirs, b_theirs));
  good(other);
  auto m3 = put(fill(naming_theirs, mine));
  good();
  run({d, other});
  expect_unknown(m1, fill(with(), a_theirs), a_theirs);
  expect_unknown(m2, fill(naming_theirs, b_theirs), b_theirs);
  EXPECT_EQ(skipped_audits(), 2);
  for (auto& id : {a_theirs, b_theirs}) {
    EXPECT_EQ(events(id, other), (strings{"SENT", "RECEIVED", "COMPLETED"}));
    EXPECT_EQ(column(id, "attempts", other), opt_str{"1"});
  }
  expect_invalid_message(m3, fill(naming_theirs, mine), mine, not_ours(d));
}
