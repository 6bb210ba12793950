// Tests of the `cmdbus` command-line tool's send and inspect commands
// (send, send-batch, show, list, queues) and their documented exit codes:
// 0 ok, 1 usage error or invalid input, 2 not found, duplicate or (send) a
// domain without a queue and no --create, 3 database unavailable, 4 other
// failure. The binary runs as a child process with a clean libpq
// environment and an explicit --dsn.

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "cmdbus/db/command_bus.hpp"
#include "cmdbus/db/connection.hpp"
#include "cmdbus/db/pool.hpp"
#include "cmdbus/model/json.hpp"
#include "cmdbus/model/types.hpp"
#include "cmdbus/model/uuid.hpp"
#include "tests/support/bus_env.hpp"
#include "tests/support/process.hpp"
#include "tests/support/temp_dir.hpp"
#include "tests/support/sql_checks.hpp"
#include "tests/support/test_db.hpp"

using namespace cmdbus;
using namespace cmdbus::test;

namespace {

const char* unreachable_dsn =
  "host=127.0.0.1 port=1 dbname=x user=u password=pw-secret connect_timeout=2";

/// Runs `cmdbus <args...> --dsn <test dsn>`.
test::process_result with_dsn(std::vector<std::string> args) {
  args.push_back("--dsn");
  args.push_back(test::dsn());
  return test::run_cmdbus(args);
}

size_t occurrences(const std::string& haystack, const std::string& needle) {
  size_t n = 0;
  for (auto pos = haystack.find(needle); pos != std::string::npos;
       pos = haystack.find(needle, pos + needle.size()))
    ++n;
  return n;
}

bool contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

/// Extracts the value after `"key":` in compact JSON output (a string
/// without quotes, or a bare number/literal).
opt_str json_field(const std::string& text, const std::string& key) {
  auto needle = "\"" + key + "\":";
  auto pos = text.find(needle);
  if (pos == std::string::npos)
    return std::nullopt;
  pos += needle.size();
  if (pos < text.size() && text[pos] == '"') {
    auto end = text.find('"', pos + 1);
    return text.substr(pos + 1, end - pos - 1);
  }
  auto end = text.find_first_of(",}]", pos);
  return text.substr(pos, end - pos);
}

/// Checks that `text` is one JSON value with balanced brackets outside
/// strings and nothing after it but a newline.
bool balanced_json(const std::string& text) {
  int depth = 0;
  bool in_string = false, escaped = false, started = false;
  size_t i = 0;
  for (; i < text.size(); ++i) {
    char c = text[i];
    if (in_string) {
      if (escaped)
        escaped = false;
      else if (c == '\\')
        escaped = true;
      else if (c == '"')
        in_string = false;
      continue;
    }
    if (c == '"')
      in_string = true;
    else if (c == '{' || c == '[') {
      ++depth;
      started = true;
    } else if (c == '}' || c == ']') {
      if (--depth < 0)
        return false;
      if (depth == 0) {
        ++i;
        break;
      }
    }
  }
  return started && depth == 0 && !in_string && text.substr(i) == "\n";
}

} // namespace

// ============================================================================
// send
// ============================================================================

TEST(CliSend, SendsAndPrintsIdAndMsgId) {
  auto conn = test::connect();
  auto d = test::unique_name("cs");
  auto id = test::new_uuid();
  auto corr = test::new_uuid();
  auto r = with_dsn({"send", d, "DebitAccount", "--create", "--data",
                     R"({"amount":100,"tags":["x"]})", "--id", id,
                     "--correlation-id", corr, "--reply-to", d + "__replies",
                     "--max-attempts", "5"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(r.err.empty()) << r.err;
  EXPECT_TRUE(contains(r.out, id)) << r.out;
  EXPECT_TRUE(contains(r.out, "msg_id")) << r.out;
  EXPECT_TRUE(contains(r.out, d + "__commands")) << r.out;
  auto row = conn.query(
    "SELECT status, attempts, max_attempts, reply_queue, correlation_id::text, "
    "msg_id, command_type FROM commandbus.command WHERE domain = $1 AND "
    "command_id = $2::uuid",
    d, id);
  ASSERT_EQ(row.rows(), 1);
  EXPECT_EQ(row.text(0, 0), "PENDING");
  EXPECT_EQ(row.int64(0, 1), 0);
  EXPECT_EQ(row.int64(0, 2), 5);
  EXPECT_EQ(row.text(0, 3), d + "__replies");
  EXPECT_EQ(row.text(0, 4), corr);
  EXPECT_EQ(row.text(0, 6), "DebitAccount");
  auto msg_id = std::to_string(row.int64(0, 5));
  EXPECT_TRUE(contains(r.out, "msg_id " + msg_id)) << r.out;
  auto msg = conn.query(
    "SELECT message->'data' = $2::jsonb, message->>'correlation_id', "
    "message->>'reply_to', message->>'command_id' FROM pgmq.q_" + d
      + "__commands WHERE msg_id = $1::bigint",
    msg_id, std::string{R"({"amount":100,"tags":["x"]})"});
  ASSERT_EQ(msg.rows(), 1);
  EXPECT_TRUE(msg.boolean(0, 0));
  EXPECT_EQ(msg.text(0, 1), corr);
  EXPECT_EQ(msg.text(0, 2), d + "__replies");
  EXPECT_EQ(msg.text(0, 3), id);
}

TEST(CliSend, DefaultsAndJsonOutput) {
  auto conn = test::connect();
  auto d = test::unique_name("cs");
  auto r = with_dsn({"send", d, "Credit", "--json", "--create"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(balanced_json(r.out)) << r.out;
  EXPECT_EQ(r.out.front(), '{');
  auto id = json_field(r.out, "command_id");
  auto msg_id = json_field(r.out, "msg_id");
  auto corr = json_field(r.out, "correlation_id");
  ASSERT_TRUE(id && msg_id && corr) << r.out;
  EXPECT_TRUE(uuid::parse(*id));
  EXPECT_EQ(json_field(r.out, "queue"), opt_str{d + "__commands"});
  auto row = conn.query("SELECT msg_id::text, correlation_id::text, "
                        "max_attempts, reply_queue FROM commandbus.command "
                        "WHERE domain = $1 AND command_id = $2::uuid",
                        d, *id);
  ASSERT_EQ(row.rows(), 1);
  EXPECT_EQ(row.text(0, 0), *msg_id);
  EXPECT_EQ(row.text(0, 1), *corr);
  EXPECT_EQ(row.int64(0, 2), 3);
  EXPECT_EQ(row.text(0, 3), "");
  // A generated correlation id is the same in the message and in the
  // command row; data is {}.
  auto msg = conn.query("SELECT message->>'correlation_id', "
                        "message->'data' = '{}'::jsonb, message ? 'reply_to' "
                        "FROM pgmq.q_" + d + "__commands WHERE msg_id = $1::bigint",
                        *msg_id);
  ASSERT_EQ(msg.rows(), 1);
  EXPECT_EQ(msg.text(0, 0), *corr);
  EXPECT_TRUE(msg.boolean(0, 1));
  EXPECT_FALSE(msg.boolean(0, 2));
}

// --priority writes the message's "priority" member (and nothing else
// changes); show prints it; a command sent without one shows none.
TEST(CliSend, PriorityIsInTheMessageAndShown) {
  auto conn = test::connect();
  auto d = test::unique_name("cs");
  auto r = with_dsn({"send", d, "Credit", "--priority", "7", "--json",
                     "--create"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto id = json_field(r.out, "command_id");
  auto msg_id = json_field(r.out, "msg_id");
  ASSERT_TRUE(id && msg_id) << r.out;
  auto msg = conn.query("SELECT message -> 'priority' = '7'::jsonb FROM "
                        "pgmq.q_" + d + "__commands WHERE msg_id = $1::bigint",
                        *msg_id);
  ASSERT_EQ(msg.rows(), 1);
  EXPECT_TRUE(msg.boolean(0, 0));
  auto shown = with_dsn({"show", d, *id, "--json"});
  ASSERT_EQ(shown.exit_code, 0) << shown.err;
  EXPECT_TRUE(contains(shown.out, "\"priority\":7")) << shown.out;
  auto text = with_dsn({"show", d, *id});
  ASSERT_EQ(text.exit_code, 0) << text.err;
  EXPECT_TRUE(contains(text.out, "priority")) << text.out;
  auto plain = with_dsn({"send", d, "Credit", "--json"});
  ASSERT_EQ(plain.exit_code, 0) << plain.err;
  auto plain_id = json_field(plain.out, "command_id");
  ASSERT_TRUE(plain_id) << plain.out;
  auto none = with_dsn({"show", d, *plain_id, "--json"});
  EXPECT_TRUE(contains(none.out, "\"priority\":null")) << none.out;
  EXPECT_EQ(with_dsn({"send", d, "Credit", "--priority", "high"}).exit_code,
            1);
}

TEST(CliSend, DuplicateIdExitsTwo) {
  auto conn = test::connect();
  auto d = test::unique_name("cs");
  auto id = test::new_uuid();
  auto r = with_dsn({"send", d, "T", "--id", id, "--create"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  r = with_dsn({"send", d, "T", "--id", id});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_FALSE(crashed(r));
  EXPECT_TRUE(contains(r.err, "duplicate")) << r.err;
  EXPECT_TRUE(contains(r.err, id)) << r.err;
  EXPECT_EQ(line_count(r.err), 1u) << r.err;
  EXPECT_TRUE(r.out.empty()) << r.out;
  EXPECT_EQ(command_rows(conn, d), 1);
  EXPECT_EQ(queue_length(conn, d + "__commands"), 1);
}

TEST(CliSend, MissingQueueIsRefusedUnlessCreate) {
  auto conn = test::connect();
  auto d = test::unique_name("cs");
  auto queue_exists = [&] {
    return scalar(conn, "SELECT count(*) FROM pgmq.meta WHERE queue_name = $1",
                  d + "__commands")
           == opt_str{"1"};
  };
  auto r = with_dsn({"send", d, "T"});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_TRUE(contains(r.err, "queue " + d + "__commands does not exist"))
    << r.err;
  EXPECT_TRUE(contains(r.err, "--create")) << r.err;
  EXPECT_EQ(line_count(r.err), 1u) << r.err;
  EXPECT_TRUE(r.out.empty()) << r.out;
  EXPECT_FALSE(queue_exists());
  EXPECT_EQ(command_rows(conn, d), 0);
  // Under --json the refusal is JSON on stdout.
  r = with_dsn({"send", d, "T", "--json"});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_TRUE(balanced_json(r.out)) << r.out;
  EXPECT_EQ(json_field(r.out, "exit_code"), opt_str{"2"}) << r.out;
  EXPECT_TRUE(contains(*json_field(r.out, "error"), "--create")) << r.out;
  // --create makes the queue; later sends need no flag.
  r = with_dsn({"send", d, "T", "--create"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(queue_exists());
  r = with_dsn({"send", d, "T"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(command_rows(conn, d), 2);
  EXPECT_EQ(queue_length(conn, d + "__commands"), 2);
  // The C++ API still creates the queue of a new domain.
  bus_env env;
  auto other = test::unique_name("cs");
  env.bus.send(make_req(other));
  EXPECT_EQ(queue_length(conn, other + "__commands"), 1);
}

TEST(CliSend, DataFromFileAndStandardInput) {
  auto conn = test::connect();
  auto d = test::unique_name("cs");
  temp_dir dir;
  auto file = dir.write("data.json", "{\"from\": \"file\",\n \"n\": 1}\n");
  auto r = with_dsn({"send", d, "T", "--create", "--json", "--data", "@" + file});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto from_file = json_field(r.out, "msg_id");
  ASSERT_TRUE(from_file) << r.out;
  r = test::run_cmdbus({"send", d, "T", "--json", "--data", "-", "--dsn",
                        test::dsn()},
                       {}, std::string{R"({"from": "stdin", "n": 2})"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto from_stdin = json_field(r.out, "msg_id");
  ASSERT_TRUE(from_stdin) << r.out;
  auto data_of = [&](const std::string& msg_id) {
    return scalar(conn,
                  "SELECT message->>'data' FROM pgmq.q_" + d
                    + "__commands WHERE msg_id = $1::bigint",
                  msg_id);
  };
  EXPECT_EQ(data_of(*from_file), opt_str{R"({"n": 1, "from": "file"})"});
  EXPECT_EQ(data_of(*from_stdin), opt_str{R"({"n": 2, "from": "stdin"})"});
  // Unreadable file, and invalid JSON on stdin: usage errors naming --data.
  r = with_dsn({"send", d, "T", "--data", "@" + file + ".missing"});
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_TRUE(contains(r.err, "--data: cannot read " + file + ".missing"))
    << r.err;
  r = test::run_cmdbus({"send", d, "T", "--data", "-", "--dsn", test::dsn()},
                       {}, std::string{"{not json"});
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_TRUE(contains(r.err, "--data is not valid JSON")) << r.err;
  EXPECT_EQ(command_rows(conn, d), 2);
}

TEST(CliSend, DoubleDashEndsOptionsForATypeStartingWithADash) {
  auto conn = test::connect();
  auto d = test::unique_name("cs");
  auto r = test::run_cmdbus(
    {"send", "--dsn", test::dsn(), "--create", "--json", "--", d, "-Odd"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto id = json_field(r.out, "command_id");
  ASSERT_TRUE(id) << r.out;
  EXPECT_EQ(scalar(conn,
                   "SELECT command_type FROM commandbus.command WHERE domain "
                   "= $1 AND command_id = $2::uuid",
                   d, *id),
            opt_str{"-Odd"});
  // Without --, it is an unknown option.
  r = with_dsn({"send", d, "-Odd"});
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_TRUE(contains(r.err, "unknown option '-Odd'")) << r.err;
}

TEST(CliSend, InvalidDataExitsOneWithOneLine) {
  auto conn = test::connect();
  auto d = test::unique_name("cs");
  for (std::string data : {R"({"amount":)", "not json", "{\"a\":1} trailing",
                           "{'a':1}", ""}) {
    auto r = with_dsn({"send", d, "T", "--data", data});
    EXPECT_EQ(r.exit_code, 1) << data;
    EXPECT_EQ(line_count(r.err), 1u) << data << ": " << r.err;
    EXPECT_TRUE(contains(r.err, "--data")) << r.err;
    EXPECT_TRUE(r.out.empty()) << r.out;
  }
  for (std::string data : {"[1,2]", "42", "\"text\"", "null", "true"}) {
    auto r = with_dsn({"send", d, "T", "--data", data});
    EXPECT_EQ(r.exit_code, 1) << data;
    EXPECT_TRUE(contains(r.err, "object")) << data << ": " << r.err;
    EXPECT_EQ(line_count(r.err), 1u) << r.err;
  }
  EXPECT_EQ(command_rows(conn, d), 0);
}

TEST(CliSend, BadUuidsExitOne) {
  auto conn = test::connect();
  auto d = test::unique_name("cs");
  for (std::string bad : {"not-a-uuid", "12345678-1234-1234-1234-12345678901",
                          "12345678-1234-1234-1234-1234567890123", ""}) {
    auto r = with_dsn({"send", d, "T", "--id", bad});
    EXPECT_EQ(r.exit_code, 1) << bad;
    EXPECT_TRUE(contains(r.err, "--id")) << r.err;
    EXPECT_EQ(line_count(r.err), 1u) << r.err;
    r = with_dsn({"send", d, "T", "--correlation-id", bad});
    EXPECT_EQ(r.exit_code, 1) << bad;
    EXPECT_TRUE(contains(r.err, "--correlation-id")) << r.err;
  }
  EXPECT_EQ(command_rows(conn, d), 0);
}

TEST(CliSend, InvalidNamesAndArgumentsExitOne) {
  auto conn = test::connect();
  auto d = test::unique_name("cs");
  for (std::string domain : std::vector<std::string>{"bad-domain", "semi;colon", "quo'te",
                             std::string(38, 'd'), "d\xc3\xb6m", ""}) {
    auto r = with_dsn({"send", domain, "T"});
    EXPECT_EQ(r.exit_code, 1) << domain;
    EXPECT_FALSE(crashed(r));
    EXPECT_EQ(line_count(r.err), 1u) << r.err;
    EXPECT_EQ(command_rows(conn, domain), 0);
  }
  for (std::string reply : std::vector<std::string>{"bad-queue", "x;y", std::string(48, 'r')}) {
    auto r = with_dsn({"send", d, "T", "--reply-to", reply});
    EXPECT_EQ(r.exit_code, 1) << reply;
  }
  auto r = with_dsn({"send", d, "T", "--bogus"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(contains(r.err, "unknown option '--bogus'")) << r.err;
  r = with_dsn({"send", d});
  EXPECT_EQ(r.exit_code, 1);
  r = with_dsn({"send", d, "T", "extra"});
  EXPECT_EQ(r.exit_code, 1);
  r = with_dsn({"send", d, ""});
  EXPECT_EQ(r.exit_code, 1);
  r = with_dsn({"send", d, "T", "--max-attempts", "0"});
  EXPECT_EQ(r.exit_code, 1);
  r = with_dsn({"send", d, "T", "--max-attempts", "x"});
  EXPECT_EQ(r.exit_code, 1);
  r = with_dsn({"send", d, "T", "--data"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(command_rows(conn, d), 0);
}

TEST(CliSend, UnreachableDatabaseExitsThree) {
  for (auto cmd : std::vector<std::vector<std::string>>{
         {"send", "cs_x", "T"},
         {"show", "cs_x", test::new_uuid()},
         {"list", "cs_x"},
         {"queues"}}) {
    cmd.push_back("--dsn");
    cmd.push_back(unreachable_dsn);
    auto r = test::run_cmdbus(cmd);
    EXPECT_EQ(r.exit_code, 3) << cmd[0] << ": " << r.err;
    EXPECT_FALSE(crashed(r)) << r.err;
    EXPECT_FALSE(contains(r.err, "pw-secret")) << r.err;
    EXPECT_TRUE(r.out.empty()) << r.out;
  }
}

TEST(CliSend, UnmigratedDatabaseExitsFour) {
  test::scratch_database scratch;
  auto r = test::run_cmdbus({"send", "cs_x", "T", "--dsn", scratch.dsn()});
  EXPECT_EQ(r.exit_code, 4) << r.err;
  EXPECT_FALSE(crashed(r)) << r.err;
  EXPECT_FALSE(r.err.empty());
}

TEST(CliSend, HelpForEveryCommandExitsZero) {
  for (std::string cmd :
       {"send", "send-batch", "show", "list", "queues", "migrate"}) {
    for (std::string flag : {"--help", "-h"}) {
      auto r = test::run_cmdbus({cmd, flag});
      EXPECT_EQ(r.exit_code, 0) << cmd << " " << flag;
      EXPECT_TRUE(contains(r.out, "usage: cmdbus " + cmd)) << r.out;
      EXPECT_TRUE(r.err.empty()) << r.err;
    }
  }
  auto r = test::run_cmdbus({"send", "--help"});
  EXPECT_TRUE(contains(r.out, "Exit codes")) << r.out;
  EXPECT_TRUE(contains(r.out, "--correlation-id")) << r.out;
  r = test::run_cmdbus({"send-batch", "--help"});
  EXPECT_TRUE(contains(r.out, "--chunk-size")) << r.out;
}

// ============================================================================
// send-batch
// ============================================================================

TEST(CliSend, SendBatchFromFile) {
  auto conn = test::connect();
  auto d = test::unique_name("csb");
  temp_dir dir;
  auto id = test::new_uuid();
  auto corr = test::new_uuid();
  auto file = dir.write(
    "cmds.jsonl",
    "{\"command_type\":\"Debit\",\"data\":{\"amount\":1},\"command_id\":\"" + id
      + "\",\"correlation_id\":\"" + corr + "\"}\n"
      + "\n"
      + "{\"command_type\":\"Credit\",\"reply_to\":\"" + d
      + "__replies\",\"max_attempts\":4}\n"
      + "   \n"
      + "{\"command_type\":\"Debit\",\"data\":{}}\n");
  auto r = with_dsn({"send-batch", d, "--file", file, "--create"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(contains(r.out, "sent 3 command(s)")) << r.out;
  EXPECT_TRUE(contains(r.out, d + "__commands")) << r.out;
  EXPECT_TRUE(contains(r.out, "1 chunk(s)")) << r.out;
  EXPECT_EQ(command_rows(conn, d), 3);
  EXPECT_EQ(queue_length(conn, d + "__commands"), 3);
  auto row = conn.query("SELECT command_type, correlation_id::text FROM "
                        "commandbus.command WHERE domain = $1 AND "
                        "command_id = $2::uuid",
                        d, id);
  ASSERT_EQ(row.rows(), 1);
  EXPECT_EQ(row.text(0, 0), "Debit");
  EXPECT_EQ(row.text(0, 1), corr);
  auto credit = conn.query("SELECT reply_queue, max_attempts FROM "
                           "commandbus.command WHERE domain = $1 AND "
                           "command_type = 'Credit'",
                           d);
  ASSERT_EQ(credit.rows(), 1);
  EXPECT_EQ(credit.text(0, 0), d + "__replies");
  EXPECT_EQ(credit.int64(0, 1), 4);
  auto data = conn.query("SELECT count(*) FROM pgmq.q_" + d
                           + "__commands WHERE message->'data' = "
                             "'{\"amount\":1}'::jsonb AND message->>'command_id' = $1",
                         id);
  EXPECT_EQ(data.int64(0, 0), 1);
}

TEST(CliSend, SendBatchChunkSizeAndJson) {
  auto conn = test::connect();
  auto d = test::unique_name("csb");
  temp_dir dir;
  std::vector<std::string> ids;
  std::string content;
  for (int i = 0; i < 5; ++i) {
    ids.push_back(test::new_uuid());
    content += "{\"command_type\":\"T\",\"command_id\":\"" + ids.back()
               + "\",\"data\":{\"i\":" + std::to_string(i) + "}}\n";
  }
  auto file = dir.write("five.jsonl", content);
  auto r = with_dsn({"send-batch", d, "--file", file, "--chunk-size", "2",
                     "--json", "--create"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(balanced_json(r.out)) << r.out;
  EXPECT_EQ(json_field(r.out, "total_commands"), opt_str{"5"}) << r.out;
  EXPECT_EQ(json_field(r.out, "chunks"), opt_str{"3"}) << r.out;
  EXPECT_EQ(json_field(r.out, "queue"), opt_str{d + "__commands"});
  // Results in file order.
  size_t last = 0;
  for (auto& id : ids) {
    auto pos = r.out.find("\"command_id\":\"" + id + "\"");
    ASSERT_NE(pos, std::string::npos) << id;
    EXPECT_GT(pos, last);
    last = pos;
  }
  EXPECT_EQ(command_rows(conn, d), 5);
  EXPECT_EQ(queue_length(conn, d + "__commands"), 5);
}

TEST(CliSend, SendBatchInvalidLineReportsFileAndLineAndSendsNothing) {
  auto conn = test::connect();
  auto d = test::unique_name("csb");
  temp_dir dir;
  std::string good = "{\"command_type\":\"T\"}\n";
  struct bad_case {
    std::string line;
    std::string what;
  };
  std::vector<bad_case> cases{
    {"{\"command_type\":", "invalid JSON"},
    {"[1,2]", "object"},
    {"{\"data\":{}}", "command_type"},
    {"{\"command_type\":\"T\",\"command_id\":\"nope\"}", "command_id"},
    {"{\"command_type\":\"T\",\"correlation_id\":\"nope\"}", "correlation_id"},
    {"{\"command_type\":\"T\",\"data\":[1]}", "data"},
    {"{\"command_type\":\"T\",\"reply_to\":\"bad-queue\"}", "reply_to"},
    {"{\"command_type\":\"T\",\"max_attempts\":\"3\"}", "max_attempts"},
    {"{\"command_type\":7}", "command_type"},
  };
  int n = 0;
  for (auto& c : cases) {
    // Line 3 is bad; lines 1 and 2 are fine (line 2 empty).
    auto file = dir.write("bad" + std::to_string(n++) + ".jsonl",
                          good + "\n" + c.line + "\n" + good);
    auto r = with_dsn({"send-batch", d, "--file", file});
    EXPECT_EQ(r.exit_code, 1) << c.line;
    EXPECT_TRUE(contains(r.err, file + ":3:")) << c.line << ": " << r.err;
    EXPECT_TRUE(contains(r.err, c.what)) << c.line << ": " << r.err;
    EXPECT_EQ(line_count(r.err), 1u) << r.err;
    EXPECT_TRUE(r.out.empty()) << r.out;
  }
  EXPECT_EQ(command_rows(conn, d), 0);
  EXPECT_EQ(queue_length(conn, d + "__commands"), 0);
}

TEST(CliSend, SendBatchDuplicatesExitTwo) {
  auto conn = test::connect();
  auto d = test::unique_name("csb");
  temp_dir dir;
  auto id = test::new_uuid();
  auto line = "{\"command_type\":\"T\",\"command_id\":\"" + id + "\"}\n";
  // Twice within the file: nothing sent.
  auto twice = dir.write("twice.jsonl",
                         line + "{\"command_type\":\"T\"}\n" + line);
  auto r = with_dsn({"send-batch", d, "--file", twice, "--create"});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_TRUE(contains(r.err, id)) << r.err;
  EXPECT_EQ(command_rows(conn, d), 0);
  // Against the database.
  auto once = dir.write("once.jsonl", line);
  r = with_dsn({"send-batch", d, "--file", once});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  r = with_dsn({"send-batch", d, "--file", once});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_TRUE(contains(r.err, "duplicate")) << r.err;
  EXPECT_EQ(command_rows(conn, d), 1);
  EXPECT_EQ(queue_length(conn, d + "__commands"), 1);
}

TEST(CliSend, SendBatchUsageErrorsExitOne) {
  auto d = test::unique_name("csb");
  temp_dir dir;
  auto r = with_dsn({"send-batch", d});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(contains(r.err, "--file")) << r.err;
  r = with_dsn({"send-batch", d, "--file", "/nonexistent/dir/x.jsonl"});
  EXPECT_EQ(r.exit_code, 1);
  auto empty = dir.write("empty.jsonl", "\n\n");
  r = with_dsn({"send-batch", d, "--file", empty});
  EXPECT_EQ(r.exit_code, 1);
  auto ok = dir.write("ok.jsonl", "{\"command_type\":\"T\"}\n");
  r = with_dsn({"send-batch", d, "--file", ok, "--chunk-size", "0"});
  EXPECT_EQ(r.exit_code, 1);
  r = with_dsn({"send-batch", "bad-domain", "--file", ok});
  EXPECT_EQ(r.exit_code, 1);
  r = with_dsn({"send-batch", "--file", ok});
  EXPECT_EQ(r.exit_code, 1);
  r = with_dsn({"send-batch", d, "--file", ok, "--frob"});
  EXPECT_EQ(r.exit_code, 1);
  auto conn = test::connect();
  EXPECT_EQ(command_rows(conn, d), 0);
}

// ============================================================================
// show
// ============================================================================

TEST(CliShow, ShowsMetadataAndAuditTrail) {
  bus_env env;
  auto d = test::unique_name("csh");
  auto req = make_req(d, "Transfer");
  req.correlation_id = uuid::random();
  req.reply_to = d + "__replies";
  req.max_attempts = 6;
  auto res = env.bus.send(req);
  auto id = req.command_id.to_string();
  auto r = with_dsn({"show", d, id});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(contains(r.out, id)) << r.out;
  EXPECT_TRUE(contains(r.out, "Transfer"));
  EXPECT_TRUE(contains(r.out, "PENDING"));
  EXPECT_TRUE(contains(r.out, "0 of 6"));
  EXPECT_TRUE(contains(r.out, req.correlation_id->to_string()));
  EXPECT_TRUE(contains(r.out, d + "__replies"));
  EXPECT_TRUE(contains(r.out, std::to_string(res.msg_id)));
  EXPECT_TRUE(contains(r.out, "audit trail"));
  EXPECT_TRUE(contains(r.out, "SENT"));
  // A later event follows SENT.
  env.conn.query("INSERT INTO commandbus.audit (domain, command_id, "
                 "event_type, details_json) VALUES ($1, $2::uuid, "
                 "'RECEIVED', '{\"attempt\":1}')",
                 d, id);
  r = with_dsn({"show", d, id});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto sent = r.out.find("SENT");
  auto received = r.out.find("RECEIVED");
  ASSERT_NE(sent, std::string::npos);
  ASSERT_NE(received, std::string::npos);
  EXPECT_LT(sent, received);
}

TEST(CliShow, JsonOutput) {
  bus_env env;
  auto d = test::unique_name("csh");
  auto req = make_req(d, "Transfer");
  req.correlation_id = uuid::random();
  auto res = env.bus.send(req);
  auto r = with_dsn({"show", d, req.command_id.to_string(), "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(balanced_json(r.out)) << r.out;
  EXPECT_EQ(r.out.rfind("{\"command\":{", 0), 0u) << r.out;
  EXPECT_EQ(json_field(r.out, "command_id"),
            opt_str{req.command_id.to_string()});
  EXPECT_EQ(json_field(r.out, "domain"), opt_str{d});
  EXPECT_EQ(json_field(r.out, "status"), opt_str{"PENDING"});
  EXPECT_EQ(json_field(r.out, "msg_id"), opt_str{std::to_string(res.msg_id)});
  EXPECT_EQ(json_field(r.out, "reply_to"), opt_str{"null"});
  EXPECT_EQ(json_field(r.out, "batch_id"), opt_str{"null"});
  EXPECT_EQ(json_field(r.out, "correlation_id"),
            opt_str{req.correlation_id->to_string()});
  EXPECT_TRUE(contains(r.out, "\"audit\":[{")) << r.out;
  EXPECT_EQ(json_field(r.out, "event_type"), opt_str{"SENT"});
  EXPECT_EQ(occurrences(r.out, "\"event_type\":"), 1u);
}

TEST(CliShow, UnknownIdExitsTwoAndBadIdExitsOne) {
  bus_env env;
  auto d = test::unique_name("csh");
  auto req = make_req(d);
  env.bus.send(req);
  auto r = with_dsn({"show", d, test::new_uuid()});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_TRUE(contains(r.err, "not found")) << r.err;
  EXPECT_EQ(line_count(r.err), 1u);
  EXPECT_TRUE(r.out.empty());
  // Domain-scoped: the id exists, but not in this domain.
  r = with_dsn({"show", test::unique_name("csh"), req.command_id.to_string()});
  EXPECT_EQ(r.exit_code, 2);
  r = with_dsn({"show", d, "not-a-uuid"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(contains(r.err, "not-a-uuid")) << r.err;
  r = with_dsn({"show", d});
  EXPECT_EQ(r.exit_code, 1);
  r = with_dsn({"show", "bad-domain", req.command_id.to_string()});
  EXPECT_EQ(r.exit_code, 1);
  r = with_dsn({"show", d, req.command_id.to_string(), "--nope"});
  EXPECT_EQ(r.exit_code, 1);
}

// ============================================================================
// list
// ============================================================================

namespace {

/// Three commands with created_at 2001-01-01 00:00:01..03 (oldest first);
/// the middle one COMPLETED.
struct list_fixture {
  explicit list_fixture(bus_env& env) : domain(test::unique_name("cl")) {
    for (int i = 0; i < 3; ++i) {
      auto req = make_req(domain, "Type" + std::to_string(i));
      env.bus.send(req);
      ids.push_back(req.command_id.to_string());
      env.conn.query("UPDATE commandbus.command SET created_at = "
                     "$3::timestamptz WHERE domain = $1 AND command_id = "
                     "$2::uuid",
                     domain, ids.back(),
                     "2001-01-01 00:00:0" + std::to_string(i + 1) + "+00");
    }
    env.conn.query("UPDATE commandbus.command SET status = 'COMPLETED' "
                   "WHERE domain = $1 AND command_id = $2::uuid",
                   domain, ids[1]);
  }
  std::string domain;
  std::vector<std::string> ids;
};

} // namespace

TEST(CliList, ListsNewestFirst) {
  bus_env env;
  list_fixture f{env};
  auto r = with_dsn({"list", f.domain});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto p0 = r.out.find(f.ids[0]);
  auto p1 = r.out.find(f.ids[1]);
  auto p2 = r.out.find(f.ids[2]);
  ASSERT_NE(p0, std::string::npos) << r.out;
  ASSERT_NE(p1, std::string::npos);
  ASSERT_NE(p2, std::string::npos);
  EXPECT_LT(p2, p1);
  EXPECT_LT(p1, p0);
  EXPECT_TRUE(contains(r.out, "COMPLETED"));
  EXPECT_TRUE(contains(r.out, "0/3"));
  EXPECT_EQ(line_count(r.out), 5u) << r.out; // header, rule, 3 rows
}

TEST(CliList, StatusFilterAndBadStatus) {
  bus_env env;
  list_fixture f{env};
  auto r = with_dsn({"list", f.domain, "--status", "COMPLETED"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(contains(r.out, f.ids[1])) << r.out;
  EXPECT_FALSE(contains(r.out, f.ids[0]));
  EXPECT_FALSE(contains(r.out, f.ids[2]));
  r = with_dsn({"list", f.domain, "--status", "PENDING", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(contains(r.out, f.ids[0]));
  EXPECT_TRUE(contains(r.out, f.ids[2]));
  EXPECT_FALSE(contains(r.out, f.ids[1]));
  r = with_dsn({"list", f.domain, "--status", "CANCELED", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "[]\n");
  // Case-insensitive.
  r = with_dsn({"list", f.domain, "--status", "completed"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(contains(r.out, f.ids[1])) << r.out;
  EXPECT_FALSE(contains(r.out, f.ids[0]));
  EXPECT_FALSE(contains(r.out, f.ids[2]));
  for (std::string bad : {"BOGUS", "done", ""}) {
    r = with_dsn({"list", f.domain, "--status", bad});
    EXPECT_EQ(r.exit_code, 1) << bad;
    EXPECT_EQ(line_count(r.err), 1u) << r.err;
    EXPECT_TRUE(r.out.empty());
  }
}

TEST(CliList, JsonLimitOffsetAndType) {
  bus_env env;
  list_fixture f{env};
  auto r = with_dsn({"list", f.domain, "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(balanced_json(r.out)) << r.out;
  EXPECT_EQ(r.out.front(), '[');
  EXPECT_EQ(occurrences(r.out, "\"command_id\":"), 3u);
  EXPECT_LT(r.out.find(f.ids[2]), r.out.find(f.ids[0]));
  EXPECT_TRUE(contains(r.out, "\"created_at\":\"2001-01-01T00:00:03.000000Z\""))
    << r.out;
  r = with_dsn({"list", f.domain, "--json", "--limit", "1"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(occurrences(r.out, "\"command_id\":"), 1u);
  EXPECT_TRUE(contains(r.out, f.ids[2])) << r.out;
  r = with_dsn({"list", f.domain, "--json", "--limit", "1", "--offset", "2"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(occurrences(r.out, "\"command_id\":"), 1u);
  EXPECT_TRUE(contains(r.out, f.ids[0])) << r.out;
  r = with_dsn({"list", f.domain, "--json", "--type", "Type1"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(occurrences(r.out, "\"command_id\":"), 1u);
  EXPECT_TRUE(contains(r.out, f.ids[1])) << r.out;
  r = with_dsn({"list", test::unique_name("cl"), "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "[]\n");
  r = with_dsn({"list", f.domain, "--limit", "-1"});
  EXPECT_EQ(r.exit_code, 1);
  r = with_dsn({"list", f.domain, "--limit", "ten"});
  EXPECT_EQ(r.exit_code, 1);
  r = with_dsn({"list"});
  EXPECT_EQ(r.exit_code, 1);
  r = with_dsn({"list", "bad;domain"});
  EXPECT_EQ(r.exit_code, 1);
}

// ============================================================================
// queues
// ============================================================================

TEST(CliQueues, ListsQueueWithLength) {
  bus_env env;
  auto d = test::unique_name("cq");
  auto req = make_req(d);
  req.reply_to = d + "__replies";
  env.bus.send(req);
  env.bus.send(make_req(d));
  auto r = with_dsn({"queues"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(contains(r.out, "queue")) << r.out;
  auto find_row = [&](const std::string& queue) -> opt_str {
    std::istringstream in{r.out};
    std::string line;
    while (std::getline(in, line)) {
      std::istringstream cols{line};
      std::string name, length;
      cols >> name >> length;
      if (name == queue)
        return length;
    }
    return std::nullopt;
  };
  EXPECT_EQ(find_row(d + "__commands"), opt_str{"2"}) << r.out;
  EXPECT_EQ(find_row(d + "__replies"), opt_str{"0"}) << r.out;
}

TEST(CliQueues, JsonOutput) {
  bus_env env;
  auto d = test::unique_name("cq");
  env.bus.send(make_req(d));
  env.bus.send(make_req(d));
  env.bus.send(make_req(d));
  auto r = with_dsn({"queues", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(balanced_json(r.out)) << r.out;
  EXPECT_EQ(r.out.front(), '[');
  auto pos = r.out.find("{\"queue_name\":\"" + d + "__commands\"");
  ASSERT_NE(pos, std::string::npos) << r.out;
  auto obj = r.out.substr(pos, r.out.find('}', pos) - pos + 1);
  EXPECT_EQ(json_field(obj, "queue_length"), opt_str{"3"}) << obj;
  EXPECT_EQ(json_field(obj, "queue_visible_length"), opt_str{"3"}) << obj;
  EXPECT_EQ(json_field(obj, "total_messages"), opt_str{"3"}) << obj;
  auto r2 = with_dsn({"queues", "extra"});
  EXPECT_EQ(r2.exit_code, 1);
  r2 = with_dsn({"queues", "--bogus"});
  EXPECT_EQ(r2.exit_code, 1);
}
