// Least-privilege roles (`cmdbus grant`, docs/operations.md "Roles"): the
// command itself (dry run, idempotence, memberships, its errors); what each
// group may not do (a reader changes nothing, an operator alters and drops
// nothing, a worker drops no queue and creates one only as the owner) and that
// queues and tables created later are usable by the groups at once; and the
// jobs done through the tool as each role: an operator provides the queue and
// sends, a `cmdbus worker` as the worker role completes commands (a retry, a
// move to the troubleshooting queue, a reply, a batch, a process) and goes on
// after its connection was cut, the reader reads.
//
// Each test has a scratch database of its own, migrated by the test
// server's superuser (the owner), so that the grants it makes on every table
// of the database race with no other test; and a unique prefix for its
// roles, which it drops at the end (roles are the cluster's).

#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <vector>

#include "cmdbus/db/error.hpp"
#include "cmdbus/db/migrate.hpp"
#include "cmdbus/db/roles.hpp"
#include "cmdbus/sql/bundle.hpp"
#include "tests/db/background_cmdbus.hpp"
#include "tests/db/roles_env.hpp"
#include "tests/support/eventually.hpp"
#include "tests/support/process.hpp"
#include "tests/support/sql_checks.hpp"
#include "tests/support/tcp_proxy.hpp"
#include "tests/support/test_db.hpp"

using namespace cmdbus;
using namespace cmdbus::test;
using namespace std::chrono_literals;

namespace {

bool contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

// The SQLSTATE `sql` fails with as `c`'s role ("" when it succeeds).
std::string sqlstate_of(db::connection& c, const std::string& sql) {
  try {
    c.exec(sql);
    return "";
  } catch (const db::error& e) {
    return e.sqlstate();
  }
}

opt_str is_member(db::connection& c, const std::string& role,
                  const std::string& group) {
  return scalar(c, "SELECT pg_has_role($1, $2, 'MEMBER')::text", role, group);
}

} // namespace

TEST(Roles, GrantCreatesTheGroupsOnceAndItsDryRunChangesNothing) {
  roles_env env;
  auto role_count = [&] {
    return scalar(env.owner,
                  "SELECT count(*) FROM pg_roles WHERE rolname IN ($1, $2, $3)",
                  env.groups.worker, env.groups.operator_role,
                  env.groups.reader);
  };
  // --dry-run prints the SQL and changes nothing.
  auto r = env.grant({"--dry-run"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(
    contains(r.out, "CREATE ROLE \"" + env.groups.worker + "\" NOLOGIN"))
    << r.out;
  EXPECT_TRUE(contains(r.out, "GRANT \"" + env.groups.reader + "\" TO \""
                                + env.reader_login + "\";"))
    << r.out;
  EXPECT_TRUE(contains(r.out, "ALTER DEFAULT PRIVILEGES FOR ROLE")) << r.out;
  EXPECT_EQ(role_count(), "0");
  r = env.grant({"--dry-run", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(jget(env.owner, r.out, "{dry_run}"), "true") << r.out;
  EXPECT_EQ(jget(env.owner, r.out, "{created_groups,2}"), env.groups.reader);
  EXPECT_EQ(role_count(), "0");

  // The grant: NOLOGIN groups, each login in its own group only.
  r = env.grant();
  ASSERT_EQ(r.exit_code, 0) << r.err << r.out;
  EXPECT_TRUE(contains(r.out, "created group " + env.groups.operator_role))
    << r.out;
  EXPECT_EQ(scalar(env.owner,
                   "SELECT count(*) FROM pg_roles WHERE rolname IN ($1, $2, "
                   "$3) AND NOT rolcanlogin AND NOT rolsuper",
                   env.groups.worker, env.groups.operator_role,
                   env.groups.reader),
            "3");
  EXPECT_EQ(is_member(env.owner, env.worker_login, env.groups.worker), "true");
  EXPECT_EQ(is_member(env.owner, env.worker_login, env.groups.operator_role),
            "false");
  EXPECT_EQ(is_member(env.owner, env.operator_login, env.groups.operator_role),
            "true");
  EXPECT_EQ(is_member(env.owner, env.reader_login, env.groups.reader), "true");
  EXPECT_EQ(is_member(env.owner, env.reader_login, env.groups.worker), "false");

  // Again: nothing to create, the same rights, exit 0.
  auto acl = [&] {
    return scalar(env.owner,
                  "SELECT string_agg(relname || ':' || relacl::text, ';' "
                  "ORDER BY relname) FROM pg_class WHERE relnamespace IN "
                  "('commandbus'::regnamespace, 'pgmq'::regnamespace)");
  };
  auto before = acl();
  r = env.grant({"--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(jget(env.owner, r.out, "{created_groups}"), "[]") << r.out;
  EXPECT_EQ(jget(env.owner, r.out, "{dry_run}"), "false") << r.out;
  EXPECT_EQ(acl(), before);

  // Errors: a role that does not exist (2, nothing changed), a bad prefix
  // or role name (1), a role that may not grant (4).
  auto nobody = unique_name("rl_nobody");
  r = ::roles_env::cli({"grant", "--prefix", env.prefix, "--worker",
                        env.worker_login, "--reader", nobody},
                       env.db.dsn());
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_TRUE(contains(r.err, "no such role: " + nobody)) << r.err;
  EXPECT_EQ(is_member(env.owner, env.worker_login, env.groups.reader), "false");
  r = ::roles_env::cli({"grant", "--prefix", "Bad-Prefix"}, env.db.dsn());
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_TRUE(contains(r.err, "invalid group prefix")) << r.err;
  r = ::roles_env::cli({"grant", "--reader", "pg_monitor"}, env.db.dsn());
  EXPECT_EQ(r.exit_code, 1) << r.err;
  r = ::roles_env::cli({"grant", "--prefix", env.prefix},
                       env.dsn_as(env.operator_login));
  EXPECT_EQ(r.exit_code, 4) << r.err;
  EXPECT_TRUE(contains(r.err, "may not grant")) << r.err;
  EXPECT_EQ(acl(), before);
}

TEST(Roles, EachGroupIsRefusedWhatItsJobDoesNotNeed) {
  roles_env env;
  auto queue = unique_name("rlq");
  env.owner.query("SELECT pgmq.create($1)", queue);
  auto q_table = "pgmq.q_" + queue;
  auto r = env.grant();
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto reader = env.connect_as(env.reader_login);
  auto op = env.connect_as(env.operator_login);
  auto worker = env.connect_as(env.worker_login);

  // The reader reads everything and changes nothing.
  for (auto table :
       {"command", "batch", "audit", "process", "process_audit",
        "cmdbus_schedule", "cmdbus_batch_delivery", "cmdbus_migrations"})
    EXPECT_EQ(sqlstate_of(reader, std::string{"SELECT count(*) FROM "
                                              "commandbus."}
                                    + table),
              "")
      << table;
  EXPECT_EQ(sqlstate_of(reader, "SELECT * FROM pgmq.metrics_all()"), "");
  EXPECT_EQ(sqlstate_of(reader, "SELECT count(*) FROM " + q_table), "");
  for (auto& sql : std::vector<std::string>{
         "INSERT INTO commandbus.audit (domain, command_id, event_type) "
         "VALUES ('d', gen_random_uuid(), 'X')",
         "UPDATE commandbus.batch SET name = 'x'",
         "DELETE FROM commandbus.command",
         "SELECT commandbus.cmdbus_send_command('d', '" + queue
           + "', gen_random_uuid(), 'T', '{}'::jsonb, NULL, NULL, 3, NULL)",
         "SELECT pgmq.send('" + queue + "', '{}'::jsonb)",
         "SELECT pgmq.create('" + queue + "_r')",
         "SELECT commandbus.cmdbus_create_queue('" + queue + "_r')",
         "SELECT commandbus.cmdbus_create_priority_index('" + queue + "')",
         "CREATE TABLE commandbus.reader_t (i int)"})
    EXPECT_EQ(sqlstate_of(reader, sql), "42501") << sql;

  // The operator: no DDL on commandbus's tables or a queue's, no writes to
  // the bookkeeping.
  for (auto& sql : std::vector<std::string>{
         "ALTER TABLE commandbus.command ADD COLUMN x INT",
         "DROP TABLE commandbus.audit", "TRUNCATE commandbus.batch",
         "CREATE INDEX ON commandbus.command (attempts)",
         "CREATE TABLE commandbus.op_t (i int)",
         "CREATE TABLE pgmq.q_op_t (i int)", "DROP TABLE " + q_table,
         "ALTER TABLE " + q_table + " ADD COLUMN x INT",
         "SELECT pgmq.drop_queue('" + queue + "')",
         "SELECT pgmq.purge_queue('" + queue + "')", "DELETE FROM pgmq.meta",
         "UPDATE commandbus.cmdbus_migrations SET checksum = 'x'",
         "DROP FUNCTION commandbus.cmdbus_create_queue(text)"})
    EXPECT_EQ(sqlstate_of(op, sql), "42501") << sql;
  // The worker: no queue dropped, none created with its own rights, no DDL.
  for (auto& sql : std::vector<std::string>{
         "SELECT pgmq.drop_queue('" + queue + "')", "DROP TABLE " + q_table,
         "SELECT pgmq.create('" + queue + "_w')",
         "ALTER TABLE commandbus.batch ADD COLUMN x INT", "TRUNCATE " + q_table,
         "CREATE TABLE pgmq.q_w_t (i int)"})
    EXPECT_EQ(sqlstate_of(worker, sql), "42501") << sql;
  EXPECT_EQ(scalar(env.owner,
                   "SELECT count(*) FROM pgmq.meta WHERE "
                   "queue_name LIKE $1 || '%'",
                   queue),
            "1");
  EXPECT_EQ(scalar(env.owner, "SELECT to_regclass($1) IS NOT NULL", q_table),
            "t");

  // What they may: the worker moves messages and builds the priority index
  // (as the function's owner); the operator and the worker create a queue,
  // which belongs to the owner; the groups use it at once, as a queue the
  // owner creates directly and a table of a later migration.
  EXPECT_EQ(sqlstate_of(worker, "SELECT pgmq.send('" + queue
                                  + "', '{}'::jsonb); SELECT pgmq.archive('"
                                  + queue + "', 1::bigint)"),
            "");
  EXPECT_EQ(sqlstate_of(worker, "SELECT commandbus.cmdbus_create_priority_"
                                "index('"
                                  + queue + "')"),
            "");
  auto later = unique_name("rlq");
  EXPECT_EQ(scalar(op, "SELECT commandbus.cmdbus_create_queue($1)::text",
                   later),
            "true");
  EXPECT_EQ(scalar(env.owner,
                   "SELECT tableowner = current_user FROM pg_tables WHERE "
                   "schemaname = 'pgmq' AND tablename = $1",
                   "q_" + later),
            "t");
  auto by_worker = unique_name("rlq");
  EXPECT_EQ(scalar(worker, "SELECT commandbus.cmdbus_create_queue($1)::text",
                   by_worker),
            "true");
  auto direct = unique_name("rlq");
  env.owner.query("SELECT pgmq.create($1)", direct);
  env.owner.exec("CREATE TABLE commandbus.rl_later (i INT)");
  for (auto& q : {later, by_worker, direct}) {
    EXPECT_EQ(scalar(env.owner,
                     "SELECT tableowner = current_user FROM pg_tables WHERE "
                     "schemaname = 'pgmq' AND tablename = $1",
                     "q_" + q),
              "t")
      << q;
    EXPECT_EQ(sqlstate_of(worker, "SELECT pgmq.send('" + q
                                    + "', '{}'::jsonb); SELECT * FROM "
                                      "pgmq.read('"
                                    + q + "', 30, 1)"),
              "")
      << q;
    EXPECT_EQ(sqlstate_of(op, "SELECT pgmq.send('" + q + "', '{}'::jsonb)"), "")
      << q;
    EXPECT_EQ(sqlstate_of(reader, "SELECT count(*) FROM pgmq.q_" + q), "") << q;
    EXPECT_EQ(sqlstate_of(worker, "DROP TABLE pgmq.q_" + q), "42501") << q;
    EXPECT_EQ(sqlstate_of(op, "SELECT pgmq.drop_queue('" + q + "')"), "42501")
      << q;
  }
  EXPECT_EQ(sqlstate_of(worker, "INSERT INTO commandbus.rl_later VALUES (1)"),
            "");
  EXPECT_EQ(sqlstate_of(reader, "SELECT * FROM commandbus.rl_later"), "");
  EXPECT_EQ(sqlstate_of(reader, "INSERT INTO commandbus.rl_later VALUES (1)"),
            "42501");
}

TEST(Roles, TheToolDoesEachJobAsItsRoleAndTheWorkerSurvivesACut) {
  roles_env env;
  auto r = env.grant();
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto domain = unique_name("rld");
  auto queue = domain + "__commands";
  auto replies = domain + "__replies";
  auto as_op = env.dsn_as(env.operator_login);
  auto as_reader = env.dsn_as(env.reader_login);
  auto as_worker = env.dsn_as(env.worker_login);

  // A reader finds no queue: it may not create one, and says who can.
  r = roles_env::cli({"queues", "--create", queue}, as_reader);
  EXPECT_EQ(r.exit_code, 4) << r.err;
  EXPECT_TRUE(
    contains(r.err, "role " + env.reader_login + " may not create queues"))
    << r.err;
  EXPECT_TRUE(contains(r.err, "`cmdbus queues --create " + queue + "`"))
    << r.err;

  // The operator provides the queue and sends: a reply, a retry, a move to
  // the troubleshooting queue, a batch, a process (whose reply queue it
  // creates), a delayed command it cancels.
  r = roles_env::cli({"queues", "--create", queue}, as_op);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto send = [&](const std::string& data,
                  std::vector<std::string> extra = {}) {
    std::vector<std::string> args{"send",   domain, "Test",
                                  "--data", data,   "--json"};
    args.insert(args.end(), extra.begin(), extra.end());
    auto res = roles_env::cli(args, as_op);
    EXPECT_EQ(res.exit_code, 0) << res.err;
    return jget(env.owner, res.out, "{command_id}").value_or("");
  };
  auto ok = send(R"({"behavior": {"result": {"ok": 1}}})",
                 {"--reply-to", replies});
  // A command whose reply queue is gone by the time it completes (a sender
  // that never created it): the worker role creates it, as the owner, and
  // the domain's other completions do not wait for anybody.
  auto gone = domain + "__gone";
  auto orphan = send(R"({"behavior": {"result": {"ok": 2}}})",
                     {"--reply-to", gone});
  env.owner.query("SELECT pgmq.drop_queue($1)", gone);
  auto retried = send(R"({"behavior": {"transient_attempts": 1}})");
  auto broken = send(R"({"behavior": {"outcome": "permanent"}})");
  auto delayed = send("{}", {"--delay", "1h"});
  auto batch_in = std::string{R"({"command_type": "Test", "data": {}})"} + "\n"
                  + R"({"command_type": "Test", "data": {}})" + "\n";
  r = run_cmdbus({"send-batch", domain, "--file", "-", "--batch", "--json",
                  "--dsn", as_op},
                 {}, batch_in);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto batch = jget(env.owner, r.out, "{batch_id}").value_or("");
  r = roles_env::cli({"process", "start", domain, "DemoOrder", "--data",
                      R"({"order_id": "o-1", "charge": "ok"})", "--json"},
                     as_op);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto process = jget(env.owner, r.out, "{process_id}").value_or("");
  r = roles_env::cli({"cancel", domain, delayed}, as_op);
  EXPECT_EQ(r.exit_code, 0) << r.err;

  // The worker, as the worker role, through a proxy that the test cuts.
  auto port = *scalar(env.owner, "SELECT current_setting('port')");
  tcp_proxy proxy{std::stoi(port)};
  background_cmdbus worker{
    {"worker", "--demo", "--domain", domain, "--dsn",
     as_worker + " port=" + std::to_string(proxy.port()) + " connect_timeout=2",
     "--backoff", "0", "--poll-interval", "100ms", "--quiet"}};
  auto status = [&](const std::string& id) {
    return scalar(env.owner,
                  "SELECT status FROM commandbus.command WHERE domain = $1 "
                  "AND command_id = $2::uuid",
                  domain, id);
  };
  auto process_status = [&] {
    return scalar(env.owner,
                  "SELECT status FROM commandbus.process WHERE domain = $1 "
                  "AND process_id = $2::uuid",
                  domain, process);
  };
  auto batch_status = [&] {
    return scalar(env.owner,
                  "SELECT status || ':' || completed_count FROM "
                  "commandbus.batch WHERE domain = $1 AND batch_id = $2::uuid",
                  domain, batch);
  };
  EXPECT_TRUE(eventually(
    [&] {
      return status(ok) == "COMPLETED" && status(retried) == "COMPLETED"
             && status(orphan) == "COMPLETED"
             && status(broken) == "IN_TROUBLESHOOTING_QUEUE"
             && process_status() == "COMPLETED"
             && batch_status() == "COMPLETED:2";
    },
    30s))
    << status(ok).value_or("-") << " " << status(retried).value_or("-") << " "
    << status(broken).value_or("-") << " " << process_status().value_or("-")
    << " " << batch_status().value_or("-");
  EXPECT_EQ(scalar(env.owner,
                   "SELECT attempts FROM commandbus.command WHERE domain = $1 "
                   "AND command_id = $2::uuid",
                   domain, retried),
            "2");
  EXPECT_EQ(status(delayed), "CANCELED");
  EXPECT_EQ(queue_rows(env.owner, replies), 1);
  EXPECT_EQ(queue_rows(env.owner, gone), 1);
  EXPECT_EQ(scalar(env.owner,
                   "SELECT tableowner = current_user FROM pg_tables WHERE "
                   "schemaname = 'pgmq' AND tablename = $1",
                   "q_" + gone),
            "t");

  // The connection is cut: the worker goes on once it is back.
  proxy.cut();
  auto after_cut = send(R"({"behavior": {"outcome": "success"}})");
  EXPECT_FALSE(worker.wait(0ms).has_value()) << "the worker exited";
  proxy.restore();
  EXPECT_TRUE(eventually([&] { return status(after_cut) == "COMPLETED"; }, 30s))
    << status(after_cut).value_or("-");

  // The operator repairs (tsq cancel), the reader reads, and may not send.
  r = roles_env::cli({"tsq", "cancel", domain, broken}, as_op);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(status(broken), "CANCELED");
  for (auto& args : std::vector<std::vector<std::string>>{{"list", domain},
                                                          {"show", domain, ok},
                                                          {"stats", domain},
                                                          {"queues"},
                                                          {"batch", "show",
                                                           domain, batch}}) {
    r = roles_env::cli(args, as_reader);
    EXPECT_EQ(r.exit_code, 0) << args[0] << ": " << r.err;
  }
  r = roles_env::cli({"send", domain, "Test"}, as_reader);
  EXPECT_EQ(r.exit_code, 4) << r.err;
  EXPECT_TRUE(contains(r.err, "permission denied")) << r.err;
  EXPECT_TRUE(contains(r.err, "cmdbus grant")) << r.err;
  auto stopped = worker.stop();
  ASSERT_TRUE(stopped.has_value());
  EXPECT_EQ(stopped->exit_code, 0) << stopped->err;
}
