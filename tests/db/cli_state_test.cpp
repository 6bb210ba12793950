// Tests of the `cmdbus` commands that show the state: show (payload, next
// attempt, result), replies (read and peek), wait (its exit codes) and
// migrate --status. The binary runs as a child process with --dsn.

#include <gtest/gtest.h>

#include <future>
#include <string>
#include <vector>

#include "cmdbus/db/connection.hpp"
#include "cmdbus/model/json.hpp"
#include "cmdbus/model/types.hpp"
#include "cmdbus/model/uuid.hpp"
#include "cmdbus/model/wire.hpp"
#include "cmdbus/sql/bundle.hpp"
#include "tests/support/bus_env.hpp"
#include "tests/support/eventually.hpp"
#include "tests/support/process.hpp"
#include "tests/support/sql_checks.hpp"
#include "tests/support/test_db.hpp"

using namespace cmdbus;
using namespace cmdbus::test;

namespace {

process_result cli(std::vector<std::string> args,
                   const std::string& target = dsn()) {
  args.push_back("--dsn");
  args.push_back(target);
  return run_cmdbus(args);
}

bool contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

/// A command of a new domain (queue created first), sent with `data`.
struct sent_command {
  std::string domain;
  uuid id;
  int64_t msg_id = 0;
};

sent_command
send_one(bus_env& env, const std::string& data = R"({"n": 7})",
         const std::optional<std::string>& reply_to = std::nullopt) {
  sent_command s;
  s.domain = unique_name("state");
  env.bus.ensure_queue(queue_of(s.domain));
  auto req = make_req(s.domain, "Test", data);
  req.reply_to = reply_to;
  s.id = req.command_id;
  s.msg_id = env.bus.send(req).msg_id;
  return s;
}

void set_status(bus_env& env, const sent_command& s, const std::string& st) {
  env.conn.query("UPDATE commandbus.command SET status = $1"
                 " WHERE domain = $2 AND command_id = $3",
                 st, s.domain, s.id.to_string());
}

/// Archives or deletes (`op`) the command's message and sets its status.
void settle(bus_env& env, const sent_command& s, const std::string& op,
            const std::string& status) {
  env.conn.query("SELECT pgmq." + op + "($1, $2::bigint)", queue_of(s.domain),
                 s.msg_id);
  set_status(env, s, status);
}

std::string success_reply(const uuid& id, const std::string& result) {
  reply x;
  x.command_id = id;
  x.outcome = reply_outcome::success;
  x.result = json::parse(result);
  return wire::encode_reply(x);
}

void push(db::connection& c, const std::string& queue,
          const std::string& message) {
  c.query("SELECT pgmq.send($1, $2::jsonb)", queue, message);
}

/// The length of the array `key` of the JSON object `text`.
opt_str array_length(db::connection& c, const std::string& text,
                     const std::string& key) {
  return scalar(c, "SELECT jsonb_array_length($1::jsonb -> $2)", text, key);
}

/// Whether a `cmdbus` process is connected to the test database.
bool cli_connected(db::connection& c) {
  return scalar(c, "SELECT count(*) FROM pg_stat_activity"
                   " WHERE application_name = 'cmdbus-cli'"
                   " AND datname = current_database()")
         != "0";
}

void finish(db::connection& c, const sent_command& s,
            const std::string& status) {
  c.query("SELECT commandbus.sp_finish_command($1, $2::uuid, $3, $3)", s.domain,
          s.id.to_string(), status);
}

/// Runs `cmdbus wait ... --timeout 60s <extra>` on the command, made
/// IN_PROGRESS, and finishes it with `status` (sp_finish_command) while the
/// wait runs; returns what the wait printed.
process_result wait_while_finishing(bus_env& env, const sent_command& s,
                                    const std::string& status,
                                    std::vector<std::string> extra) {
  set_status(env, s, "IN_PROGRESS");
  std::vector<std::string> args{"wait", s.domain, s.id.to_string(), "--timeout",
                                "60s"};
  args.insert(args.end(), extra.begin(), extra.end());
  auto waiting = std::async(std::launch::async, [&] { return cli(args); });
  EXPECT_TRUE(eventually([&] { return cli_connected(env.conn); }))
    << "the wait did not connect";
  finish(env.conn, s, status);
  return waiting.get();
}

} // namespace

// -- show -------------------------------------------------------------------

TEST(CliShow, PayloadFromTheQueue) {
  bus_env env;
  auto s = send_one(env);
  auto r = cli({"show", s.domain, s.id.to_string(), "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(jget(env.conn, r.out, "{payload,n}"), "7") << r.out;
  EXPECT_EQ(jget(env.conn, r.out, "{payload_source}"), "queue");
  EXPECT_TRUE(jhas(env.conn, r.out, "next_attempt_at"));
  EXPECT_EQ(jget(env.conn, r.out, "{next_attempt_at}"), std::nullopt);
  EXPECT_EQ(jget(env.conn, r.out, "{result}"), std::nullopt);
  auto text = cli({"show", s.domain, s.id.to_string()});
  ASSERT_EQ(text.exit_code, 0) << text.err;
  EXPECT_TRUE(contains(text.out, R"({"n":7})")) << text.out;
  EXPECT_TRUE(contains(text.out, "(from the queue)")) << text.out;
}

TEST(CliShow, PayloadFromTheArchive) {
  bus_env env;
  auto s = send_one(env);
  settle(env, s, "archive", "IN_TROUBLESHOOTING_QUEUE");
  auto r = cli({"show", s.domain, s.id.to_string(), "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(jget(env.conn, r.out, "{payload,n}"), "7") << r.out;
  EXPECT_EQ(jget(env.conn, r.out, "{payload_source}"), "archive");
  EXPECT_EQ(jget(env.conn, r.out, "{next_attempt_at}"), std::nullopt);
}

TEST(CliShow, CompletedCommandWithoutReplyHasNoPayloadAndNoResult) {
  bus_env env;
  auto s = send_one(env);
  settle(env, s, "delete", "COMPLETED");
  auto r = cli({"show", s.domain, s.id.to_string(), "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(jget(env.conn, r.out, "{payload_source}"), std::nullopt) << r.out;
  EXPECT_EQ(jget(env.conn, r.out, "{result}"), std::nullopt);
  auto text = cli({"show", s.domain, s.id.to_string()});
  EXPECT_TRUE(contains(text.out, "not stored")) << text.out;
}

TEST(CliShow, NextAttemptAfterATransientFailure) {
  bus_env env;
  auto s = send_one(env);
  set_status(env, s, "IN_PROGRESS");
  env.conn.exec("UPDATE pgmq.q_" + queue_of(s.domain)
                  + " SET vt = now() + interval '42 seconds'"
                    " WHERE msg_id = $1",
                {std::to_string(s.msg_id)});
  auto r = cli({"show", s.domain, s.id.to_string(), "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto due = jget(env.conn, r.out, "{next_attempt_at}");
  ASSERT_TRUE(due) << r.out;
  EXPECT_EQ(scalar(env.conn,
                   "SELECT $1::timestamptz = vt FROM pgmq.q_"
                     + queue_of(s.domain) + " WHERE msg_id = $2",
                   *due, s.msg_id),
            "t");
  auto text = cli({"show", s.domain, s.id.to_string()});
  EXPECT_TRUE(contains(text.out, "due at ")) << text.out;
  EXPECT_TRUE(contains(text.out, "s)")) << text.out;
}

TEST(CliShow, ResultFromTheReplyInTheQueueThenInTheArchive) {
  bus_env env;
  auto replies = unique_name("state_r");
  env.bus.ensure_queue(replies);
  auto s = send_one(env, "{}", replies);
  settle(env, s, "delete", "COMPLETED");
  // Another command's reply first: only this command's counts.
  push(env.conn, replies, success_reply(uuid::random(), R"({"other": 1})"));
  push(env.conn, replies, success_reply(s.id, R"({"total": 42})"));
  auto r = cli({"show", s.domain, s.id.to_string(), "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(jget(env.conn, r.out, "{result,total}"), "42") << r.out;
  EXPECT_EQ(jget(env.conn, r.out, "{result_source}"), "reply_queue");
  env.conn.query("SELECT pgmq.archive($1, msg_id) FROM pgmq.q_" + replies,
                 replies);
  r = cli({"show", s.domain, s.id.to_string(), "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(jget(env.conn, r.out, "{result,total}"), "42") << r.out;
  EXPECT_EQ(jget(env.conn, r.out, "{result_source}"), "reply_archive");
}

// -- replies ----------------------------------------------------------------

TEST(CliReplies, PeekChangesNothingAndReadConsumesIntoTheArchive) {
  bus_env env;
  auto queue = unique_name("state_r");
  env.bus.ensure_queue(queue);
  auto a = uuid::random();
  auto b = uuid::random();
  push(env.conn, queue, success_reply(a, R"({"x": 1})"));
  reply failed;
  failed.command_id = b;
  failed.outcome = reply_outcome::failed;
  failed.error_code = "LIMIT";
  failed.error_message = "over the limit";
  push(env.conn, queue, wire::encode_reply(failed));
  push(env.conn, queue, R"({"not": "a reply"})");

  auto peek = cli({"replies", queue, "--peek", "--json"});
  ASSERT_EQ(peek.exit_code, 0) << peek.err;
  EXPECT_EQ(scalar(env.conn, "SELECT jsonb_array_length($1::jsonb)", peek.out),
            "3");
  EXPECT_EQ(jget(env.conn, peek.out, "{0,command_id}"), a.to_string());
  EXPECT_EQ(jget(env.conn, peek.out, "{0,outcome}"), "SUCCESS");
  EXPECT_EQ(jget(env.conn, peek.out, "{0,result,x}"), "1");
  EXPECT_EQ(jget(env.conn, peek.out, "{1,outcome}"), "FAILED");
  EXPECT_EQ(jget(env.conn, peek.out, "{1,error_code}"), "LIMIT");
  EXPECT_EQ(jget(env.conn, peek.out, "{2,valid}"), "false");
  EXPECT_EQ(jget(env.conn, peek.out, "{2,raw,not}"), "a reply");
  EXPECT_TRUE(contains(peek.err, "not a valid reply")) << peek.err;
  EXPECT_TRUE(contains(peek.err, "left in the queue")) << peek.err;
  EXPECT_EQ(queue_rows(env.conn, queue), 3);
  EXPECT_EQ(archive_rows(env.conn, queue), 0);
  EXPECT_EQ(scalar(env.conn, "SELECT sum(read_ct) FROM pgmq.q_" + queue), "0");
  EXPECT_EQ(scalar(env.conn, "SELECT count(*) FROM pgmq.q_" + queue
                               + " WHERE vt > now()"),
            "0");

  auto text = cli({"replies", queue, "--peek"});
  ASSERT_EQ(text.exit_code, 0) << text.err;
  EXPECT_TRUE(contains(text.out, "over the limit")) << text.out;
  EXPECT_TRUE(contains(text.out, "INVALID")) << text.out;

  auto one = cli({"replies", queue, "--limit", "1", "--json"});
  ASSERT_EQ(one.exit_code, 0) << one.err;
  EXPECT_EQ(jget(env.conn, one.out, "{0,command_id}"), a.to_string());
  EXPECT_EQ(queue_rows(env.conn, queue), 2);
  EXPECT_EQ(archive_rows(env.conn, queue), 1);

  auto rest = cli({"replies", queue});
  ASSERT_EQ(rest.exit_code, 0) << rest.err;
  EXPECT_TRUE(contains(rest.out, b.to_string())) << rest.out;
  EXPECT_TRUE(contains(rest.out, "2 message(s) consumed")) << rest.out;
  EXPECT_TRUE(contains(rest.err, "archived")) << rest.err;
  EXPECT_EQ(queue_rows(env.conn, queue), 0);
  EXPECT_EQ(archive_rows(env.conn, queue), 3);

  auto none = cli({"replies", queue, "--json"});
  ASSERT_EQ(none.exit_code, 0) << none.err;
  EXPECT_EQ(none.out, "[]\n");
}

TEST(CliReplies, WaitsForAReply) {
  bus_env env;
  auto queue = unique_name("state_r");
  env.bus.ensure_queue(queue);
  auto id = uuid::random();
  auto waiting = std::async(std::launch::async, [&] {
    return cli({"replies", queue, "--wait", "60s", "--json"});
  });
  ASSERT_TRUE(eventually([&] { return cli_connected(env.conn); }));
  db::connection other = connect();
  push(other, queue, success_reply(id, "{}"));
  auto r = waiting.get();
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(jget(env.conn, r.out, "{0,command_id}"), id.to_string()) << r.out;
}

TEST(CliReplies, UnknownQueueExitsTwo) {
  auto r = cli({"replies", unique_name("no_such_q")});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_EQ(cli({"replies", "bad name!"}).exit_code, 1);
}

// -- wait -------------------------------------------------------------------

TEST(CliWait, CompletedExitsZero) {
  bus_env env;
  auto s = send_one(env);
  auto r = wait_while_finishing(env, s, "COMPLETED", {"--json"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(jget(env.conn, r.out, "{status}"), "COMPLETED") << r.out;
}

TEST(CliWait, TroubleshootingQueueExitsFive) {
  bus_env env;
  auto s = send_one(env);
  auto r = wait_while_finishing(env, s, "IN_TROUBLESHOOTING_QUEUE", {});
  EXPECT_EQ(r.exit_code, 5) << r.err;
  EXPECT_TRUE(contains(r.out, "IN_TROUBLESHOOTING_QUEUE")) << r.out;
}

TEST(CliWait, FailedAndCanceledExitFive) {
  bus_env env;
  auto s = send_one(env);
  set_status(env, s, "FAILED");
  EXPECT_EQ(cli({"wait", s.domain, s.id.to_string()}).exit_code, 5);
  set_status(env, s, "CANCELED");
  EXPECT_EQ(cli({"wait", s.domain, s.id.to_string()}).exit_code, 5);
}

TEST(CliWait, TimeoutExitsSeven) {
  bus_env env;
  auto s = send_one(env);
  auto r = cli({"wait", s.domain, s.id.to_string(), "--timeout", "200ms"});
  EXPECT_EQ(r.exit_code, 7) << r.err;
  EXPECT_TRUE(contains(r.err, "still PENDING")) << r.err;
}

TEST(CliWait, UnknownCommandExitsTwoAndNoDatabaseThree) {
  bus_env env;
  auto s = send_one(env);
  EXPECT_EQ(cli({"wait", s.domain, uuid::random().to_string()}).exit_code, 2);
  auto r = cli({"wait", s.domain, s.id.to_string()},
               "host=127.0.0.1 port=1 dbname=x user=u connect_timeout=2");
  EXPECT_EQ(r.exit_code, 3) << r.err;
  EXPECT_EQ(cli({"wait", s.domain}).exit_code, 1);
  auto help = cli({"wait", "--help"});
  EXPECT_TRUE(contains(help.out, "7  --timeout passed first")) << help.out;
}

// -- migrate --status -------------------------------------------------------

TEST(CliMigrateStatus, FreshDatabaseHasEverythingPendingAndStaysUntouched) {
  scratch_database scratch;
  auto r = cli({"migrate", "--status", "--json"}, scratch.dsn());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto conn = db::connection::open(scratch.dsn());
  EXPECT_EQ(array_length(conn, r.out, "applied"), "0") << r.out;
  EXPECT_EQ(scalar(conn,
                   "SELECT count(*) FROM jsonb_array_elements($1::jsonb ->"
                   " 'pending') e WHERE e->>'name' LIKE 'commandbus/V%'",
                   r.out),
            std::to_string(sql::commandbus_files().size()))
    << r.out;
  EXPECT_EQ(scalar(conn, "SELECT to_regnamespace('commandbus')::text"),
            std::nullopt);
  auto text = cli({"migrate", "--status"}, scratch.dsn());
  EXPECT_TRUE(contains(text.out, "0 applied")) << text.out;
}

TEST(CliMigrateStatus, AfterMigrateAllAppliedThenATamperedChecksum) {
  scratch_database scratch;
  ASSERT_EQ(cli({"migrate"}, scratch.dsn()).exit_code, 0);
  auto r = cli({"migrate", "--status", "--json"}, scratch.dsn());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto conn = db::connection::open(scratch.dsn());
  EXPECT_EQ(array_length(conn, r.out, "pending"), "0") << r.out;
  EXPECT_EQ(scalar(conn,
                   "SELECT count(*) FROM jsonb_array_elements($1::jsonb ->"
                   " 'applied') e WHERE e->>'checksum_state' <> 'match'",
                   r.out),
            "0");
  EXPECT_EQ(jget(conn, r.out, "{tampered}"), "false");

  conn.exec("UPDATE commandbus.cmdbus_migrations SET checksum = "
            "'0000000000000000' WHERE component = 'commandbus' AND "
            "version = 'V003'");
  r = cli({"migrate", "--status", "--json"}, scratch.dsn());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(jget(conn, r.out, "{tampered}"), "true");
  EXPECT_EQ(scalar(conn,
                   "SELECT e->>'checksum_state' FROM jsonb_array_elements("
                   "$1::jsonb -> 'applied') e WHERE e->>'name' LIKE "
                   "'commandbus/V003%'",
                   r.out),
            "changed");
  auto text = cli({"migrate", "--status"}, scratch.dsn());
  ASSERT_EQ(text.exit_code, 0) << text.err;
  EXPECT_TRUE(contains(text.out, "changed")) << text.out;
  EXPECT_TRUE(contains(text.out, "will refuse to run")) << text.out;
  // An earlier, comment-only text is accepted and said so.
  conn.exec("UPDATE commandbus.cmdbus_migrations SET checksum = "
            "'7b1b8de246e50bfb' WHERE component = 'commandbus' AND "
            "version = 'V003'");
  r = cli({"migrate", "--status", "--json"}, scratch.dsn());
  EXPECT_EQ(jget(conn, r.out, "{tampered}"), "false");
}
