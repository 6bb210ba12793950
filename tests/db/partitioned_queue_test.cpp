// Partitioned queues (`cmdbus queues --create Q --partitioned`, migrations
// pgmq/V002 and commandbus/V015; docs/operations.md "Partitioned queues"):
// - without pg_partman: the refusal (exit 4, what to install and run) and
//   nothing of the queue created; option errors are usage errors;
// - with pg_partman (each in a scratch database of its own, so that the
//   suites' database stays without it): the CLI creates queues
//   partitioned by id or time with the retention kept by cmdbus, refuses
//   bad intervals and a plain queue of the same name without creating
//   anything; every PGMQ function and cmdbus's read on a partitioned
//   queue; rows beyond the partitions (in the default partition) are moved,
//   not lost; a queue made by pgmq.create_partitioned directly has its
//   retention taken over;
// - a worker end to end on a partitioned domain queue with the
//   housekeeping runner: old partitions of the queue and the archive are
//   dropped, while the partitions holding a delayed command's message and
//   a troubleshooting-queue command's archived message stay (and the
//   operator's retry of that command works); /metrics counts them; a queue
//   whose lock is not granted keeps its partitions; `cmdbus prune` killed
//   with -9 while its maintenance waits changes nothing, and a rerun
//   finishes.

#include <gtest/gtest.h>

#include <csignal>
#include <string>
#include <vector>

#include "cmdbus/db/command_bus.hpp"
#include "cmdbus/db/pool.hpp"
#include "cmdbus/db/queue_name.hpp"
#include "cmdbus/model/errors.hpp"
#include "tests/db/background_cmdbus.hpp"
#include "tests/support/http_env.hpp"
#include "tests/support/process.hpp"
#include "tests/support/worker_env.hpp"

using namespace cmdbus;
using namespace cmdbus::test;
using namespace std::chrono_literals;

namespace {

process_result cli_on(const std::string& dsn, std::vector<std::string> args) {
  args.push_back("--dsn");
  args.push_back(dsn);
  return run_cmdbus(args);
}

int64_t number(db::connection& c, const std::string& sql,
               const std::string& arg) {
  return c.query(sql, arg).int64(0, 0);
}

std::string text(db::connection& c, const std::string& sql,
                 const std::string& arg) {
  auto r = c.query(sql, arg);
  return r.is_null(0, 0) ? "NULL" : std::string{r.text(0, 0)};
}

// Relations of every kind whose name holds `name` (tables, partitions,
// indexes, sequences, templates), in any schema.
int64_t objects_of(db::connection& c, const std::string& name) {
  return number(
    c, "SELECT count(*) FROM pg_class WHERE strpos(relname, $1) > 0", name);
}

// The lower bounds of the partitions (not the default) of pgmq.<table>,
// ascending, as text.
std::string partitions(db::connection& c, const std::string& table) {
  return text(c,
              "SELECT string_agg(b, ',' ORDER BY b::bigint) FROM (SELECT "
              "(regexp_match(pg_get_expr(k.relpartbound, k.oid), "
              "'FROM \\(''([^'']*)''\\)'))[1] AS b FROM pg_inherits i JOIN "
              "pg_class k ON k.oid = i.inhrelid WHERE i.inhparent = ('pgmq.' "
              "|| $1)::regclass) x WHERE b IS NOT NULL",
              table);
}

// A migrated scratch database with pg_partman in schema partman.
struct partman_database {
  scratch_database db;
  db::connection conn;

  partman_database() : conn(migrated(db.dsn())) {
    conn.exec("CREATE SCHEMA partman;"
              "CREATE EXTENSION pg_partman SCHEMA partman");
  }

  static db::connection migrated(const std::string& dsn) {
    auto r = run_cmdbus({"migrate", "--dsn", dsn});
    if (r.exit_code != 0)
      throw std::runtime_error("migrate failed: " + r.err);
    return db::connection::open(dsn);
  }

  const std::string& dsn() const {
    return db.dsn();
  }
};

} // namespace

TEST(PartitionedQueues, RefusedWithoutPgPartmanAndNothingIsCreated) {
  auto conn = connect();
  ASSERT_EQ(number(conn, "SELECT count(*) FROM pg_extension WHERE extname = $1",
                   "pg_partman"),
            0)
    << "the suites' database must not have pg_partman";
  auto queue = unique_name("nopart") + "__commands";
  auto r = cli_on(dsn(), {"queues", "--create", queue, "--partitioned",
                          "--partition-interval", "10"});
  EXPECT_EQ(r.exit_code, 4) << r.out << r.err;
  for (const char* part :
       {"cannot create partitioned queue", "pg_partman extension",
        "postgresql-15-partman", "CREATE SCHEMA partman;",
        "CREATE EXTENSION pg_partman SCHEMA partman;"})
    EXPECT_NE(r.err.find(part), std::string::npos) << part << "\n" << r.err;
  // The function refuses by itself too (a caller that skips the check).
  try {
    conn.query("SELECT commandbus.cmdbus_create_partitioned_queue($1, '10', "
               "'20')",
               queue);
    ADD_FAILURE() << "created without pg_partman";
  } catch (const db::error& e) {
    EXPECT_EQ(e.sqlstate(), "55000");
    EXPECT_NE(std::string{e.what()}.find("pg_partman"), std::string::npos);
  }
  EXPECT_EQ(objects_of(conn, queue), 0);
  EXPECT_EQ(number(conn, "SELECT count(*) FROM pgmq.meta WHERE queue_name = $1",
                   queue),
            0);
  EXPECT_EQ(number(conn,
                   "SELECT count(*) FROM commandbus.cmdbus_partitioned_queue "
                   "WHERE queue_name = $1",
                   queue),
            0);
  // Option errors are usage errors, found before the database is asked.
  auto alone = cli_on(dsn(), {"queues", "--create", queue,
                              "--partition-retention", "20"});
  EXPECT_EQ(alone.exit_code, 1) << alone.err;
  EXPECT_NE(alone.err.find("need --partitioned"), std::string::npos)
    << alone.err;
  auto nothing = cli_on(dsn(), {"queues", "--partitioned"});
  EXPECT_EQ(nothing.exit_code, 1) << nothing.err;
  EXPECT_EQ(objects_of(conn, queue), 0);
}

TEST(PartitionedQueues, CreatedByTheCliAndEveryQueueFunctionWorksOnThem) {
  partman_database pm;
  auto& c = pm.conn;
  // By time, from the CLI: the retention is cmdbus's, not pg_partman's.
  auto timed = unique_name("ptime") + "__commands";
  auto made = cli_on(pm.dsn(), {"queues", "--create", timed, "--partitioned",
                                "--partition-interval", "1 hour",
                                "--partition-retention", "1 day"});
  ASSERT_EQ(made.exit_code, 0) << made.err;
  EXPECT_EQ(text(c,
                 "SELECT is_partitioned::text FROM pgmq.meta WHERE "
                 "queue_name = $1",
                 timed),
            "true");
  EXPECT_EQ(text(c,
                 "SELECT string_agg(control || ':' || coalesce(retention, "
                 "'-') || ':' || infinite_time_partitions::text, ',' ORDER "
                 "BY parent_table) FROM partman.part_config WHERE "
                 "parent_table IN ('pgmq.q_' || $1, 'pgmq.a_' || $1)",
                 timed),
            "archived_at:-:true,enqueued_at:-:true");
  EXPECT_EQ(text(c,
                 "SELECT retention FROM commandbus.cmdbus_partitioned_queue "
                 "WHERE queue_name = $1",
                 timed),
            "1 day");
  // Again: nothing to do, exit 0.
  EXPECT_EQ(
    cli_on(pm.dsn(), {"queues", "--create", timed, "--partitioned"}).exit_code,
    0);

  // Refusals create nothing: bad intervals (usage, 1), a plain queue of
  // that name (4).
  auto bad = unique_name("pbad") + "__commands";
  for (std::vector<std::string> opts :
       {std::vector<std::string>{"--partition-interval", "0"},
        {"--partition-interval", "ten"},
        {"--partition-interval", "10", "--partition-retention", "2 days"},
        {"--partition-interval", "1 day", "--partition-retention", "-5"}}) {
    std::vector<std::string> args{"queues", "--create", bad, "--partitioned"};
    args.insert(args.end(), opts.begin(), opts.end());
    auto r = cli_on(pm.dsn(), args);
    EXPECT_EQ(r.exit_code, 1) << opts[1] << ": " << r.err;
    EXPECT_NE(r.err.find("cannot create partitioned queue"), std::string::npos)
      << r.err;
  }
  EXPECT_EQ(objects_of(c, bad), 0);
  auto plain = unique_name("pplain") + "__commands";
  ASSERT_EQ(cli_on(pm.dsn(), {"queues", "--create", plain}).exit_code, 0);
  auto objects = objects_of(c, plain);
  auto clash = cli_on(pm.dsn(), {"queues", "--create", plain, "--partitioned"});
  EXPECT_EQ(clash.exit_code, 4) << clash.err;
  EXPECT_NE(clash.err.find("exists and is not partitioned"), std::string::npos)
    << clash.err;
  EXPECT_EQ(objects_of(c, plain), objects);

  // By id: every PGMQ function, and cmdbus's read by priority.
  auto q = unique_name("pid");
  c.query("SELECT commandbus.cmdbus_create_partitioned_queue($1, '10', '20')",
          q);
  EXPECT_EQ(number(c,
                   "SELECT count(*) FROM pgmq.send_batch($1, "
                   "ARRAY['{\"n\":1}','{\"n\":2}','{\"n\":3,\"priority\":5}']"
                   "::jsonb[])",
                   q),
            3);
  c.query("SELECT pgmq.send($1, '{\"n\":4}', 3600)", q);
  EXPECT_EQ(text(c,
                 "SELECT string_agg(msg_id::text, ',') FROM "
                 "commandbus.cmdbus_read($1, 30, 1, p_priority => true)",
                 q),
            "3");
  EXPECT_EQ(number(c, "SELECT count(*) FROM pgmq.read($1, 30, 10)", q), 2);
  EXPECT_EQ(number(c, "SELECT count(*) FROM pgmq.set_vt($1, 1, 0)", q), 1);
  EXPECT_EQ(text(c, "SELECT msg_id::text FROM pgmq.pop($1)", q), "1");
  EXPECT_EQ(text(c, "SELECT pgmq.delete($1, 2::bigint)::text", q), "true");
  EXPECT_EQ(text(c, "SELECT pgmq.archive($1, 3::bigint)::text", q), "true");
  EXPECT_EQ(text(c,
                 "SELECT queue_length || '/' || total_messages FROM "
                 "pgmq.metrics($1)",
                 q),
            "1/4");
  EXPECT_EQ(
    number(c, "SELECT count(*) FROM pgmq.a_" + q + " WHERE msg_id = $1::bigint",
           "3"),
    1);
  EXPECT_EQ(text(c, "SELECT commandbus.cmdbus_create_priority_index($1)::text",
                 q),
            "true");
  // Beyond the premade partitions (ids 0..49): the default partition takes
  // them, and the maintenance moves them to partitions of their own.
  c.query("SELECT pgmq.send_batch($1, array_fill('{}'::jsonb, ARRAY[60]))", q);
  EXPECT_GT(
    number(c, "SELECT count(*) FROM pgmq.q_" + q + "_default WHERE $1 <> ''",
           "x"),
    0);
  auto m = c.query("SELECT created, dropped, kept FROM "
                   "commandbus.cmdbus_partition_maintenance($1)",
                   q);
  EXPECT_GT(m.int64(0, 0), 0);
  EXPECT_EQ(
    number(c, "SELECT count(*) FROM pgmq.q_" + q + "_default WHERE $1 <> ''",
           "x"),
    0);
  EXPECT_EQ(
    number(c, "SELECT count(*) FROM pgmq.q_" + q + " WHERE $1 <> ''", "x"), 61);
  EXPECT_EQ(number(c, "SELECT pgmq.purge_queue($1)", q), 61);
  EXPECT_EQ(text(c, "SELECT pgmq.drop_queue($1)::text", q), "true");
  EXPECT_EQ(objects_of(c, q), 0) << "tables, partitions or templates left";
  EXPECT_EQ(number(c,
                   "SELECT count(*) FROM partman.part_config WHERE "
                   "parent_table LIKE '%' || $1",
                   q),
            0);

  // Made by PGMQ's function directly: the retention is in part_config,
  // where pg_partman would drop by it; the first maintenance takes it over.
  auto direct = unique_name("pdirect");
  c.query("SELECT pgmq.create_partitioned($1, '10', '30')", direct);
  EXPECT_EQ(text(c,
                 "SELECT retention FROM partman.part_config WHERE "
                 "parent_table = 'pgmq.a_' || $1",
                 direct),
            "30");
  c.query("SELECT * FROM commandbus.cmdbus_partition_maintenance($1)", direct);
  EXPECT_EQ(text(c,
                 "SELECT count(retention)::text FROM partman.part_config "
                 "WHERE parent_table LIKE '%' || $1",
                 direct),
            "0");
  EXPECT_EQ(text(c,
                 "SELECT retention FROM commandbus.cmdbus_partitioned_queue "
                 "WHERE queue_name = $1",
                 direct),
            "30");
}

TEST(PartitionedQueues,
     AWorkerRunsOnOneAndOnlyPartitionsHoldingNothingNeededAreDropped) {
  partman_database pm;
  auto& c = pm.conn;
  auto domain = unique_name("part");
  auto queue = db::command_queue(domain);
  auto made = cli_on(pm.dsn(), {"queues", "--create", queue, "--partitioned",
                                "--partition-interval", "10",
                                "--partition-retention", "20"});
  ASSERT_EQ(made.exit_code, 0) << made.err;

  db::pool_options opts;
  opts.dsn = pm.dsn();
  opts.max_size = 2;
  db::pool pool{opts};
  command_bus bus{pool};
  // msg 1: a delayed command (its message waits in the queue table);
  // msg 2: one that goes to the troubleshooting queue (its message waits
  // in the archive); 3..30: plain ones.
  auto delayed = make_req(domain, "Noop");
  delayed.not_before = not_before_in(1h);
  EXPECT_EQ(bus.send(delayed).msg_id, 1);
  auto broken = make_req(domain, "Broken");
  EXPECT_EQ(bus.send(broken).msg_id, 2);
  for (int i = 0; i < 28; ++i)
    bus.send(make_req(domain, "Noop"));

  auto cfg = make_cfg({domain});
  cfg.dsn = pm.dsn();
  cfg.http = "127.0.0.1:0";
  cfg.retention.ages.archive = std::chrono::milliseconds{30LL * 86'400'000};
  cfg.retention.interval = 50ms;
  handler_registry handlers;
  handlers.add(domain, "Noop", null_result);
  handlers.add(domain, "Broken", [](const command&, handler_context&) -> json {
    throw permanent_command_error("BROKEN", "cannot be done");
  });
  worker w{cfg, std::move(handlers)};
  w.start();
  finally stop{[&] { stop_worker(w); }};
  auto statuses = [&] {
    return text(c,
                "SELECT string_agg(status || ':' || n, ',' ORDER BY status) "
                "FROM (SELECT status, count(*) n FROM commandbus.command "
                "WHERE domain = $1 GROUP BY status) x",
                domain);
  };
  ASSERT_TRUE(eventually(
    [&] {
      return statuses() == "COMPLETED:28,IN_TROUBLESHOOTING_QUEUE:1,PENDING:1";
    },
    15s))
    << statuses();
  // Ids 31..70: partitions below id 50 are past the retention of 20.
  for (int i = 0; i < 40; ++i)
    bus.send(make_req(domain, "Noop"));
  ASSERT_TRUE(eventually(
    [&] {
      return statuses() == "COMPLETED:68,IN_TROUBLESHOOTING_QUEUE:1,PENDING:1"
             && partitions(c, "q_" + queue).rfind("0,50,", 0) == 0
             && partitions(c, "a_" + queue).rfind("0,50,", 0) == 0;
    },
    15s))
    << statuses() << " queue " << partitions(c, "q_" + queue) << " archive "
    << partitions(c, "a_" + queue);
  // Partition 0 stays in both: the delayed command's message, the archived
  // message of the command in the troubleshooting queue.
  EXPECT_EQ(text(c,
                 "SELECT string_agg(msg_id::text, ',') FROM pgmq.q_" + queue
                   + " WHERE msg_id < 50 AND $1 <> ''",
                 "x"),
            "1");
  EXPECT_EQ(number(c,
                   "SELECT count(*) FROM pgmq.a_" + queue
                     + " WHERE message->>'command_id' = $1",
                   broken.command_id.to_string()),
            1);
  EXPECT_EQ(number(c,
                   "SELECT count(*) FROM pgmq.a_" + queue
                     + " WHERE msg_id BETWEEN 10 AND 49 AND $1 <> ''",
                   "x"),
            0);
  EXPECT_EQ(number(c,
                   "SELECT count(*) FROM commandbus.command WHERE domain = $1",
                   domain),
            70);
  auto port = w.http_port();
  ASSERT_GT(port, 0);
  ASSERT_TRUE(eventually(
    [&] {
      return scrape(port).value("cmdbus_retention_partitions_total",
                                {{"action", "dropped"}})
             >= 8;
    },
    10s));
  EXPECT_GE(scrape(port).value("cmdbus_retention_partitions_total",
                               {{"action", "created"}}),
            1);
  // The operator's retry re-sends the kept archived message.
  auto retry = cli_on(pm.dsn(),
                      {"tsq", "retry", domain, broken.command_id.to_string()});
  EXPECT_EQ(retry.exit_code, 0) << retry.out << retry.err;
  ASSERT_TRUE(eventually(
    [&] {
      return number(c,
                    "SELECT count(*) FROM commandbus.audit WHERE command_id = "
                    "$1::uuid AND event_type = 'MOVED_TO_TSQ'",
                    broken.command_id.to_string())
             == 2;
    },
    10s));
  stop_worker(w);

  // Ids 72..91 (71 was the retry) make partitions 50 and 60 past retention.
  // A queue whose lock is not granted within the maintenance's lock timeout
  // keeps them: 4 kept besides the two partitions 0, which hold a needed
  // row. (ONLY: the lock of the parent, which the drop needs, not of its
  // partitions, which creating a partition needs.)
  for (int i = 0; i < 20; ++i)
    bus.send(make_req(domain, "Noop"));
  auto before_q = partitions(c, "q_" + queue);
  auto before_a = partitions(c, "a_" + queue);
  auto holder = db::connection::open(pm.dsn());
  holder.exec("BEGIN");
  holder.exec("LOCK TABLE ONLY pgmq.a_" + queue + " IN ACCESS SHARE MODE");
  auto busy = cli_on(pm.dsn(), {"prune", "--domain", domain, "--older-than",
                                "30d", "--json"});
  ASSERT_EQ(busy.exit_code, 0) << busy.err;
  EXPECT_EQ(text(c, "SELECT ($1::jsonb->>'partitions_dropped')", busy.out), "0")
    << busy.out;
  EXPECT_EQ(text(c, "SELECT ($1::jsonb->>'partitions_kept')", busy.out), "6")
    << busy.out;
  holder.exec("ROLLBACK");
  EXPECT_EQ(partitions(c, "a_" + queue), before_a);

  // kill -9 during a maintenance (waiting to read the queue, which another
  // session holds locked): nothing changes, and the killed session's
  // server side ends with its wait (it holds the retention lock). A rerun
  // finishes: it drops partitions 50 and 60 of both and 80 and 90 of the
  // archive, and keeps those holding unprocessed messages (70..90 of the
  // queue) and the retried command's archived message (70 of the archive).
  auto config_of = [&] {
    return text(c,
                "SELECT string_agg(parent_table || coalesce(retention, '-'), "
                "',') FROM partman.part_config WHERE parent_table LIKE '%' || "
                "$1",
                queue);
  };
  auto config_before = config_of();
  for (int i = 0; i < 30; ++i)
    bus.send(make_req(domain, "Noop"));
  before_q = partitions(c, "q_" + queue);
  before_a = partitions(c, "a_" + queue);
  holder.exec("BEGIN");
  holder.exec("LOCK TABLE pgmq.q_" + queue + " IN ACCESS EXCLUSIVE MODE");
  background_cmdbus prune{
    {"prune", "--domain", domain, "--older-than", "30d", "--dsn", pm.dsn()}};
  ASSERT_TRUE(eventually(
    [&] {
      return number(c,
                    "SELECT count(*) FROM pg_locks l WHERE NOT l.granted AND "
                    "l.relation IN (SELECT i.inhrelid FROM pg_inherits i "
                    "WHERE i.inhparent = ('pgmq.q_' || $1)::regclass)",
                    queue)
             > 0;
    },
    10s));
  prune.signal(SIGKILL);
  auto died = prune.wait(10s);
  ASSERT_TRUE(died);
  EXPECT_EQ(died->exit_code, 128 + SIGKILL);
  holder.exec("ROLLBACK");
  EXPECT_EQ(partitions(c, "q_" + queue), before_q);
  EXPECT_EQ(partitions(c, "a_" + queue), before_a);
  EXPECT_EQ(config_of(), config_before);
  auto rerun = cli_on(pm.dsn(), {"prune", "--domain", domain, "--older-than",
                                 "30d", "--json"});
  ASSERT_EQ(rerun.exit_code, 0) << rerun.err;
  EXPECT_EQ(text(c, "SELECT ($1::jsonb->>'partitions_dropped')", rerun.out),
            "6")
    << rerun.out;
  EXPECT_EQ(partitions(c, "a_" + queue).rfind("0,70,", 0), 0u)
    << partitions(c, "a_" + queue);
  EXPECT_EQ(number(c,
                   "SELECT count(*) FROM commandbus.command WHERE domain = $1",
                   domain),
            120);
}
