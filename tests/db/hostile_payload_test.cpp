// Hostile payloads in command messages put on a command queue with
// pgmq.send, read by a real worker: 10 MiB and more, nesting as deep as the
// server accepts, SQL-looking text in every field. Big and deep messages
// are handled or refused without harm, and text stays data: stored and
// replied verbatim, never executed. The worker keeps processing good
// commands (the fixture: tests/support/hostile_input.hpp). State is checked
// with SQL.

#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "cmdbus/db/error.hpp"
#include "tests/support/hostile_input.hpp"

using namespace cmdbus;
using namespace cmdbus::test;

TEST_F(HostileInput, TenMebibytesAreHandledAndMoreThanSixteenMoveToTsq) {
  auto payload = [](size_t bytes) {
    return with("data", R"({"blob":")" + std::string(bytes, 'x') + "\"}");
  };
  auto known = row();
  auto unknown = uuid::random();
  auto too_big = row();
  good();
  auto m_known = put(fill(payload(10 << 20), known));
  good();
  auto m_unknown = put(fill(payload(10 << 20), unknown));
  good();
  auto m_too_big = put(fill(payload(17 << 20), too_big));
  good();
  run();
  expect_completed(m_known, known);
  EXPECT_GE(biggest.load(), size_t{10} << 20);
  expect_unknown(m_unknown, fill(payload(10 << 20), unknown), unknown);
  expect_invalid_message(m_too_big, fill(payload(17 << 20), too_big), too_big,
                         "message larger than 16777216 bytes");
}

TEST_F(HostileInput, NestingAsDeepAsTheServerAcceptsIsRefusedOrSkipped) {
  // `data` nested k objects deep ({"a":{"a":...{"a":1}...}}) in a message,
  // which adds one level.
  auto message = [](size_t k) {
    std::string data;
    for (size_t i = 0; i < k; ++i)
      data += R"({"a":)";
    return with("data", data + "1" + std::string(k, '}'));
  };
  // Whether the server refuses it at its stack depth limit (jsonb's parser
  // recurses).
  auto refused = [&](const std::string& sql, size_t k) {
    try {
      conn.query(sql, q, fill(message(k), uuid::random()));
      return false;
    } catch (const db::error& e) {
      if (e.sqlstate() != "54001")
        throw;
      return true;
    }
  };
  EXPECT_TRUE(refused("SELECT pgmq.send($1, $2::jsonb)", 100000));
  auto parse = "SELECT $1 <> '' AND $2::jsonb IS NOT NULL";
  size_t deepest = 64; // accepted; deepest + step is refused
  ASSERT_FALSE(refused(parse, deepest));
  for (size_t step = 65536; step > 0; step /= 2)
    if (deepest + step < 100000 && !refused(parse, deepest + step))
      deepest += step;
  EXPECT_GT(deepest, 1000u) << "the server refuses shallow nesting";
  auto deep = row();
  auto unknown = uuid::random();
  auto at_limit = row();
  auto over_limit = row();
  good();
  auto m_deep = put(fill(message(deepest), deep));
  good();
  auto m_unknown = put(fill(message(deepest), unknown));
  good();
  // Our decoders take 64 levels in all and refuse the 65th.
  auto m_at_limit = put(fill(message(63), at_limit));
  auto m_over_limit = put(fill(message(64), over_limit));
  good();
  run();
  expect_invalid_message(m_deep, fill(message(deepest), deep), deep,
                         "nesting deeper than 64 levels");
  expect_unknown(m_unknown, fill(message(deepest), unknown), unknown);
  expect_completed(m_at_limit, at_limit);
  expect_invalid_message(m_over_limit, fill(message(64), over_limit),
                         over_limit, "nesting deeper than 64 levels");
}

TEST_F(HostileInput, SqlLookingTextStaysDataAndIsStoredVerbatim) {
  auto s = jstr(nasty);
  auto replies = d + "__replies";
  auto data = "{" + s + ":" + s + R"(,"list":[)" + s + "," + s + "]}";
  auto in_data = row();
  auto in_type = row("Ok", 1);
  auto in_correlation = row();
  auto in_domain = row();
  auto in_reply_to = row();
  std::vector<std::pair<uuid, std::string>> sent = {
      {in_data, with({{"reply_to", "\"" + replies + "\""}, {"data", data}})},
      {in_type, with("command_type", s)},
      {in_correlation, with("correlation_id", s)},
      {in_domain, with("domain", s)},
      {in_reply_to, with("reply_to", s)},
      {uuid::random(), with("command_id", s)}};
  std::vector<int64_t> msg_ids;
  good();
  for (auto& [id, text] : sent) {
    msg_ids.push_back(put(fill(text, id)));
    good();
  }
  run();
  // The data went to the handler and back in the reply, unchanged.
  expect_completed(msg_ids[0], in_data);
  EXPECT_EQ(scalar("SELECT (message -> 'result' = $2::jsonb)::text FROM pgmq.q_"
                       + replies + " WHERE message ->> 'command_id' = $1",
                   in_data.to_string(), data),
            opt_str{"true"});
  // The type is kept verbatim in the error of the missing handler.
  auto no_handler = "no handler registered for " + d + "/" + nasty;
  EXPECT_EQ(column(in_type, "status"), tsq);
  EXPECT_EQ(column(in_type, "last_error_msg"), opt_str{no_handler});
  EXPECT_EQ(detail(in_type, "MOVED_TO_TSQ", "error_msg"), opt_str{no_handler});
  // The error quotes the first 40 bytes of the value.
  expect_invalid_message(msg_ids[2], fill(sent[2].second, in_correlation),
                         in_correlation,
                         "field \"correlation_id\" is not a valid UUID: \""
                             + nasty.substr(0, 40) + "\"...");
  expect_invalid_message(msg_ids[3], fill(sent[3].second, in_domain), in_domain,
                         not_ours(d));
  expect_invalid_message(msg_ids[4], fill(sent[4].second, in_reply_to),
                         in_reply_to,
                         "field \"reply_to\" may contain only ASCII letters, "
                         "digits and underscores");
  EXPECT_TRUE(archived_as(msg_ids[5], fill(sent[5].second)));
  EXPECT_EQ(skipped_audits(), 0);
  // Nothing was dropped: the tables are there with every row of the test.
  EXPECT_EQ(
      scalar("SELECT count(*) FROM commandbus.command WHERE domain = $1", d),
      opt_str{std::to_string(5 + goods_.size())});
  EXPECT_EQ(
      scalar("SELECT count(*) FROM pgmq.meta WHERE queue_name IN ($1, $2)", q,
             replies),
      opt_str{"2"});
}
