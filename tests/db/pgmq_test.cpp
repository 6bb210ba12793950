// Tests of the PGMQ layer (sql/pgmq/V001__pgmq.sql, or the pgmq extension
// where it is installed) against PGMQ 1.5's documented behaviour: the
// scenarios of upstream's test/sql/base.sql and its isolation specs, plus
// edge cases.
//
// Every test uses its own queues (test::unique_name) and drops them at the
// end, so tests do not depend on each other or on the database's history.
// Only the scenarios that are about time wait, for 1-2 s at most.

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "db/connection.hpp"
#include "db/error.hpp"
#include "db/migrate.hpp"
#include "sql/bundle.hpp"
#include "tests/support/test_db.hpp"

using namespace cmdbus;
using db::errc;

namespace {

constexpr const char* invalid_chars_msg =
  "queue name contains invalid characters: $, ;, --, or \\'";
constexpr const char* too_long_msg =
  "queue name is too long, maximum length is 47 characters";
constexpr const char* partman_msg =
  "pg_partman is required for partitioned queues";

using clock_type = std::chrono::steady_clock;

double seconds_since(clock_type::time_point start) {
  return std::chrono::duration<double>(clock_type::now() - start).count();
}

std::vector<int64_t> ints(const db::result& r, int col = 0) {
  std::vector<int64_t> out;
  for (int i = 0; i < r.rows(); ++i)
    out.push_back(r.int64(i, col));
  return out;
}

std::vector<int64_t> range(int64_t from, int64_t to) {
  std::vector<int64_t> out;
  for (auto i = from; i <= to; ++i)
    out.push_back(i);
  return out;
}

std::string pad_to(std::string name, size_t len, char fill = 'x') {
  if (name.size() < len)
    name.append(len - name.size(), fill);
  return name;
}

/// Runs `f`, expecting a database error with `code` and exactly `message`.
void expect_error(const std::function<void()>& f, errc code,
                  const std::string& message) {
  try {
    f();
  } catch (const db::error& e) {
    EXPECT_EQ(e.code(), code) << "sqlstate " << e.sqlstate() << ": " << e.what();
    EXPECT_EQ(std::string{e.what()}, message);
    return;
  }
  ADD_FAILURE() << "expected error: " << message;
}

#define EXPECT_PG_ERROR(expr, code, message)                                   \
  do {                                                                         \
    SCOPED_TRACE(#expr);                                                       \
    expect_error([&] { (void) (expr); }, code, message);                       \
  } while (false)

/// Base fixture: one connection, helpers, and cleanup of created queues.
class PgmqTest : public ::testing::Test {
protected:
  db::connection conn = test::connect();

  ~PgmqTest() override {
    try {
      auto c = test::connect();
      for (auto& name : created_) {
        c.query("SELECT pgmq.drop_queue($1::text)", name);
        // Case variants share tables: the second drop finds none and,
        // like PGMQ, leaves its meta row.
        c.query("DELETE FROM pgmq.meta WHERE queue_name = $1::text", name);
      }
    } catch (...) {
      // Leftover queues are harmless (unique names).
    }
  }

  /// Remembers `name` for dropping at the end of the test.
  std::string track(std::string name) {
    created_.push_back(name);
    return name;
  }

  /// Creates a queue with a unique name via pgmq.create.
  std::string new_queue(const std::string& prefix = "pq") {
    auto name = track(test::unique_name(prefix));
    conn.query("SELECT pgmq.create($1::text)", name);
    return name;
  }

  int64_t send(const std::string& q, const std::string& msg = "{}") {
    auto r = conn.query("SELECT * FROM pgmq.send($1::text, $2::jsonb)", q, msg);
    EXPECT_EQ(r.rows(), 1);
    return r.int64(0, 0);
  }

  std::vector<int64_t> read_ids(const std::string& q, int vt, int qty) {
    return ints(conn.query("SELECT msg_id FROM pgmq.read($1::text, $2::integer, $3::integer)",
                           q, vt, qty));
  }

  template <class... Ts>
  int64_t scalar(const std::string& sql, const Ts&... xs) {
    auto r = conn.query(sql, xs...);
    EXPECT_EQ(r.rows(), 1) << sql;
    return r.int64(0, 0);
  }

  int64_t count_rows(const std::string& table) {
    return conn.exec("SELECT count(*) FROM pgmq." + table).int64(0, 0);
  }

  /// Number of pgmq tables and meta rows whose name contains `token`.
  int64_t objects_named_like(const std::string& token) {
    return scalar(
      "SELECT (SELECT count(*) FROM pg_tables WHERE schemaname = 'pgmq' "
      "        AND strpos(tablename, $1::text) > 0) "
      "     + (SELECT count(*) FROM pgmq.meta WHERE strpos(queue_name, $1::text) > 0)",
      token);
  }

private:
  std::vector<std::string> created_;
};

class PgmqCatalog : public PgmqTest {};
class PgmqCreate : public PgmqTest {};
class PgmqQueueName : public PgmqTest {};
class PgmqPartitioned : public PgmqTest {};
class PgmqSend : public PgmqTest {};
class PgmqSendBatch : public PgmqTest {};
class PgmqRead : public PgmqTest {};
class PgmqReadWithPoll : public PgmqTest {};
class PgmqPop : public PgmqTest {};
class PgmqSetVt : public PgmqTest {};
class PgmqDelete : public PgmqTest {};
class PgmqArchive : public PgmqTest {};
class PgmqPurge : public PgmqTest {};
class PgmqDrop : public PgmqTest {};
class PgmqMetrics : public PgmqTest {};
class PgmqIsolation : public PgmqTest {};
class PgmqConcurrency : public PgmqTest {};

} // namespace

// -- catalog (\df pgmq.*, \d pgmq.q_x / pgmq.a_x) ------------------------------

TEST_F(PgmqCatalog, FunctionsHaveThePgmqSignatures) {
  const std::set<std::string> expected{
    "_belongs_to_pgmq(table_name text) -> boolean",
    "_ensure_pg_partman_installed() -> void",
    "_extension_exists(extension_name text) -> boolean",
    "_get_partition_col(partition_interval text) -> text",
    "_get_pg_partman_major_version() -> integer",
    "_get_pg_partman_schema() -> text",
    "acquire_queue_lock(queue_name text) -> void",
    "archive(queue_name text, msg_id bigint) -> boolean",
    "archive(queue_name text, msg_ids bigint[]) -> SETOF bigint",
    "convert_archive_partitioned(table_name text, partition_interval text DEFAULT '10000'::text, retention_interval text DEFAULT '100000'::text, leading_partition integer DEFAULT 10) -> void",
    "create(queue_name text) -> void",
    "create_non_partitioned(queue_name text) -> void",
    "create_partitioned(queue_name text, partition_interval text DEFAULT '10000'::text, retention_interval text DEFAULT '100000'::text) -> void",
    "create_unlogged(queue_name text) -> void",
    "delete(queue_name text, msg_id bigint) -> boolean",
    "delete(queue_name text, msg_ids bigint[]) -> SETOF bigint",
    "detach_archive(queue_name text) -> void",
    "drop_queue(queue_name text) -> boolean",
    "drop_queue(queue_name text, partitioned boolean) -> boolean",
    "format_table_name(queue_name text, prefix text) -> text",
    "list_queues() -> SETOF pgmq.queue_record",
    "metrics(queue_name text) -> pgmq.metrics_result",
    "metrics_all() -> SETOF pgmq.metrics_result",
    "pop(queue_name text) -> SETOF pgmq.message_record",
    "purge_queue(queue_name text) -> bigint",
    "read(queue_name text, vt integer, qty integer, conditional jsonb DEFAULT '{}'::jsonb) -> SETOF pgmq.message_record",
    "read_with_poll(queue_name text, vt integer, qty integer, max_poll_seconds integer DEFAULT 5, poll_interval_ms integer DEFAULT 100, conditional jsonb DEFAULT '{}'::jsonb) -> SETOF pgmq.message_record",
    "send(queue_name text, msg jsonb) -> SETOF bigint",
    "send(queue_name text, msg jsonb, delay integer) -> SETOF bigint",
    "send(queue_name text, msg jsonb, delay timestamp with time zone) -> SETOF bigint",
    "send(queue_name text, msg jsonb, headers jsonb) -> SETOF bigint",
    "send(queue_name text, msg jsonb, headers jsonb, delay integer) -> SETOF bigint",
    "send(queue_name text, msg jsonb, headers jsonb, delay timestamp with time zone) -> SETOF bigint",
    "send_batch(queue_name text, msgs jsonb[]) -> SETOF bigint",
    "send_batch(queue_name text, msgs jsonb[], delay integer) -> SETOF bigint",
    "send_batch(queue_name text, msgs jsonb[], delay timestamp with time zone) -> SETOF bigint",
    "send_batch(queue_name text, msgs jsonb[], headers jsonb[]) -> SETOF bigint",
    "send_batch(queue_name text, msgs jsonb[], headers jsonb[], delay integer) -> SETOF bigint",
    "send_batch(queue_name text, msgs jsonb[], headers jsonb[], delay timestamp with time zone) -> SETOF bigint",
    "set_vt(queue_name text, msg_id bigint, vt integer) -> SETOF pgmq.message_record",
    "validate_queue_name(queue_name text) -> void",
  };
  auto r = conn.exec(
    "SELECT p.proname || '(' || pg_get_function_arguments(p.oid) || ') -> '"
    "       || pg_get_function_result(p.oid),"
    "       p.provolatile = 'v' AND NOT p.proisstrict AND NOT p.prosecdef"
    "  FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace"
    " WHERE n.nspname = 'pgmq'");
  std::set<std::string> actual;
  for (int i = 0; i < r.rows(); ++i) {
    actual.insert(std::string{r.text(i, 0)});
    EXPECT_TRUE(r.boolean(i, 1)) << r.text(i, 0) << " must be VOLATILE, not STRICT, not SECURITY DEFINER";
  }
  EXPECT_EQ(r.rows(), 41);
  EXPECT_EQ(actual, expected);
}

TEST_F(PgmqCatalog, CompositeTypesHaveThePgmqFields) {
  auto fields = [&](const std::string& type) {
    auto r = conn.query(
      "SELECT string_agg(a.attname || ' ' || format_type(a.atttypid, a.atttypmod), ', ' ORDER BY a.attnum)"
      "  FROM pg_attribute a WHERE a.attrelid = (SELECT typrelid FROM pg_type t"
      "   JOIN pg_namespace n ON n.oid = t.typnamespace"
      "  WHERE n.nspname = 'pgmq' AND t.typname = $1::text) AND a.attnum > 0",
      type);
    return std::string{r.text(0, 0)};
  };
  EXPECT_EQ(fields("message_record"),
            "msg_id bigint, read_ct integer, enqueued_at timestamp with time zone, "
            "vt timestamp with time zone, message jsonb, headers jsonb");
  EXPECT_EQ(fields("queue_record"),
            "queue_name character varying, is_partitioned boolean, is_unlogged boolean, "
            "created_at timestamp with time zone");
  EXPECT_EQ(fields("metrics_result"),
            "queue_name text, queue_length bigint, newest_msg_age_sec integer, "
            "oldest_msg_age_sec integer, total_messages bigint, "
            "scrape_time timestamp with time zone, queue_visible_length bigint");
}

TEST_F(PgmqCatalog, QueueAndArchiveTablesHaveThePgmqLayout) {
  auto q = new_queue();
  auto columns = [&](const std::string& table) {
    auto r = conn.query(
      "SELECT string_agg(column_name || ' ' || data_type || ' ' || is_nullable"
      "                  || ' ' || coalesce(column_default, '-') || ' ' || is_identity"
      "                  || ' ' || coalesce(identity_generation, '-'), ', ' ORDER BY ordinal_position)"
      "  FROM information_schema.columns"
      " WHERE table_schema = 'pgmq' AND table_name = $1::text",
      table);
    return std::string{r.text(0, 0)};
  };
  EXPECT_EQ(columns("q_" + q),
            "msg_id bigint NO - YES ALWAYS, read_ct integer NO 0 NO -, "
            "enqueued_at timestamp with time zone NO now() NO -, "
            "vt timestamp with time zone NO - NO -, message jsonb YES - NO -, "
            "headers jsonb YES - NO -");
  EXPECT_EQ(columns("a_" + q),
            "msg_id bigint NO - NO -, read_ct integer NO 0 NO -, "
            "enqueued_at timestamp with time zone NO now() NO -, "
            "archived_at timestamp with time zone NO now() NO -, "
            "vt timestamp with time zone NO - NO -, message jsonb YES - NO -, "
            "headers jsonb YES - NO -");

  auto indexes = conn.query(
    "SELECT string_agg(indexname || ': ' || indexdef, E'\\n' ORDER BY indexname)"
    "  FROM pg_indexes WHERE schemaname = 'pgmq' AND tablename IN ($1::text, $2::text)",
    "q_" + q, "a_" + q);
  EXPECT_EQ(std::string{indexes.text(0, 0)},
            "a_" + q + "_pkey: CREATE UNIQUE INDEX a_" + q + "_pkey ON pgmq.a_" + q
              + " USING btree (msg_id)\n"
            "archived_at_idx_" + q + ": CREATE INDEX archived_at_idx_" + q + " ON pgmq.a_" + q
              + " USING btree (archived_at)\n"
            "q_" + q + "_pkey: CREATE UNIQUE INDEX q_" + q + "_pkey ON pgmq.q_" + q
              + " USING btree (msg_id)\n"
            "q_" + q + "_vt_idx: CREATE INDEX q_" + q + "_vt_idx ON pgmq.q_" + q
              + " USING btree (vt)");
  EXPECT_EQ(scalar("SELECT count(*) FROM pg_sequences WHERE schemaname = 'pgmq' AND sequencename = $1::text",
                   "q_" + q + "_msg_id_seq"),
            1);
  // Both tables are logged; meta says (false, false).
  auto meta = conn.query("SELECT is_partitioned, is_unlogged FROM pgmq.meta WHERE queue_name = $1::text", q);
  ASSERT_EQ(meta.rows(), 1);
  EXPECT_FALSE(meta.boolean(0, 0));
  EXPECT_FALSE(meta.boolean(0, 1));
  EXPECT_EQ(scalar("SELECT count(*) FROM pg_class WHERE relname IN ($1::text, $2::text) AND relpersistence = 'p'",
                   "q_" + q, "a_" + q),
            2);
  // msg_id is GENERATED ALWAYS: an explicit id needs OVERRIDING SYSTEM VALUE.
  try {
    conn.exec("INSERT INTO pgmq.q_" + q + " (msg_id, vt) VALUES (42, now())");
    ADD_FAILURE() << "explicit msg_id accepted";
  } catch (const db::error& e) {
    EXPECT_EQ(e.sqlstate(), "428C9");
  }
}

TEST_F(PgmqCatalog, MetaTableAndPgMonitorGrants) {
  EXPECT_EQ(conn.exec("SELECT string_agg(column_name || ' ' || data_type || ' ' || is_nullable"
                      "  || ' ' || coalesce(column_default, '-'), ', ' ORDER BY ordinal_position)"
                      "  FROM information_schema.columns"
                      " WHERE table_schema = 'pgmq' AND table_name = 'meta'")
              .opt_text(0, 0),
            "queue_name character varying NO -, is_partitioned boolean NO -, "
            "is_unlogged boolean NO -, created_at timestamp with time zone NO now()");
  EXPECT_EQ(conn.exec("SELECT count(*) FROM pg_indexes WHERE schemaname = 'pgmq' AND indexname = 'meta_queue_name_key'")
              .int64(0, 0),
            1);
  auto grants = conn.exec(
    "SELECT has_schema_privilege('pg_monitor', 'pgmq', 'USAGE'),"
    "       has_table_privilege('pg_monitor', 'pgmq.meta', 'SELECT'),"
    "       has_table_privilege('pg_monitor', 'pgmq.meta', 'INSERT')");
  EXPECT_TRUE(grants.boolean(0, 0));
  EXPECT_TRUE(grants.boolean(0, 1));
  EXPECT_FALSE(grants.boolean(0, 2));
  // Default privileges cover queues created later by the installing role.
  auto q = new_queue();
  auto later = conn.query(
    "SELECT has_table_privilege('pg_monitor', 'pgmq.' || quote_ident('q_' || $1::text), 'SELECT'),"
    "       has_table_privilege('pg_monitor', 'pgmq.' || quote_ident('a_' || $1::text), 'SELECT'),"
    "       has_sequence_privilege('pg_monitor', 'pgmq.' || quote_ident('q_' || $1::text || '_msg_id_seq'), 'SELECT')",
    q);
  EXPECT_TRUE(later.boolean(0, 0));
  EXPECT_TRUE(later.boolean(0, 1));
  EXPECT_TRUE(later.boolean(0, 2));
}

// -- queue management ---------------------------------------------------------

// Upstream's base.sql: create_unlogged
TEST_F(PgmqCreate, UnloggedQueueSendsAndReadsWithHeaders) {
  auto q = track(test::unique_name("pu"));
  auto r = conn.query("SELECT pgmq.create_unlogged($1::text)", q);
  ASSERT_EQ(r.rows(), 1);
  EXPECT_EQ(r.text(0, 0), ""); // void
  auto meta = conn.query("SELECT is_partitioned, is_unlogged FROM pgmq.meta WHERE queue_name = $1::text", q);
  ASSERT_EQ(meta.rows(), 1);
  EXPECT_FALSE(meta.boolean(0, 0));
  EXPECT_TRUE(meta.boolean(0, 1));
  auto persistence = conn.query(
    "SELECT relname, relpersistence FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
    " WHERE n.nspname = 'pgmq' AND relname IN ($1::text, $2::text) ORDER BY relname",
    "a_" + q, "q_" + q);
  ASSERT_EQ(persistence.rows(), 2);
  EXPECT_EQ(persistence.text(0, 1), "p"); // the archive stays logged
  EXPECT_EQ(persistence.text(1, 1), "u");

  EXPECT_EQ(scalar("SELECT * FROM pgmq.send($1::text, '{\"hello\": \"world\"}'::jsonb, '{\"header\": 1}'::jsonb)", q), 1);
  auto m = conn.query(
    "SELECT msg_id, read_ct, vt > now(), message::text, headers::text FROM pgmq.read($1::text, 2, 1)", q);
  ASSERT_EQ(m.rows(), 1);
  EXPECT_EQ(m.int64(0, 0), 1);
  EXPECT_EQ(m.int64(0, 1), 1);
  EXPECT_TRUE(m.boolean(0, 2));
  EXPECT_EQ(m.text(0, 3), "{\"hello\": \"world\"}");
  EXPECT_EQ(m.text(0, 4), "{\"header\": 1}");
}

TEST_F(PgmqCreate, UnloggedOverAnExistingLoggedQueueChangesNothing) {
  auto q = new_queue();
  conn.query("SELECT pgmq.create_unlogged($1::text)", q);
  EXPECT_EQ(scalar("SELECT count(*) FROM pg_class WHERE relname = $1::text AND relpersistence = 'p'", "q_" + q), 1);
  auto meta = conn.query("SELECT is_unlogged FROM pgmq.meta WHERE queue_name = $1::text", q);
  ASSERT_EQ(meta.rows(), 1);
  EXPECT_FALSE(meta.boolean(0, 0));
}

// Upstream's base.sql: idempotent create
TEST_F(PgmqCreate, SecondCreateIsANoOpWithFourNotices) {
  auto q = new_queue();
  send(q);
  auto created_at = conn.query("SELECT created_at::text FROM pgmq.meta WHERE queue_name = $1::text", q).opt_text(0, 0);
  conn.take_notices();
  conn.query("SELECT pgmq.create($1::text)", q);
  EXPECT_EQ(conn.take_notices(),
            (std::vector<std::string>{
              "relation \"q_" + q + "\" already exists, skipping",
              "relation \"a_" + q + "\" already exists, skipping",
              "relation \"q_" + q + "_vt_idx\" already exists, skipping",
              "relation \"archived_at_idx_" + q + "\" already exists, skipping",
            }));
  EXPECT_EQ(scalar("SELECT count(*) FROM pgmq.meta WHERE queue_name = $1::text", q), 1);
  EXPECT_EQ(conn.query("SELECT created_at::text FROM pgmq.meta WHERE queue_name = $1::text", q).opt_text(0, 0),
            created_at);
  EXPECT_EQ(count_rows("q_" + q), 1); // messages kept
  // create_non_partitioned is the same function.
  conn.query("SELECT pgmq.create_non_partitioned($1::text)", q);
  EXPECT_EQ(scalar("SELECT count(*) FROM pgmq.meta WHERE queue_name = $1::text", q), 1);
}

TEST_F(PgmqCreate, CreateNonPartitionedMakesAQueue) {
  auto q = track(test::unique_name("pn"));
  conn.query("SELECT pgmq.create_non_partitioned($1::text)", q);
  EXPECT_EQ(send(q), 1);
  EXPECT_EQ(read_ids(q, 0, 1), std::vector<int64_t>{1});
}

// Upstream's base.sql: transactional create
TEST_F(PgmqCreate, CreateInARolledBackTransactionLeavesNothing) {
  auto q = test::unique_name("pt");
  {
    db::transaction tx{conn};
    conn.query("SELECT pgmq.create($1::text)", q);
    EXPECT_EQ(objects_named_like(q), 3);
  } // rollback
  EXPECT_EQ(objects_named_like(q), 0);
  EXPECT_EQ(scalar("SELECT count(*) FROM pg_class WHERE strpos(relname, $1::text) > 0", q), 0);
}

TEST_F(PgmqCreate, CreateAndDropTakeTheQueueAdvisoryLock) {
  auto q = track(test::unique_name("pl"));
  const std::string held =
    "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid()"
    "   AND granted AND mode = 'ExclusiveLock'"
    "   AND classid = ((hashtext('pgmq.queue_' || $1::text)::bigint >> 32) & 4294967295)::oid"
    "   AND objid = (hashtext('pgmq.queue_' || $1::text)::bigint & 4294967295)::oid";
  for (const char* fn : {"create", "create_unlogged", "drop_queue"}) {
    SCOPED_TRACE(fn);
    db::transaction tx{conn};
    EXPECT_EQ(scalar(held, q), 0);
    conn.query(std::string{"SELECT pgmq."} + fn + "($1::text)", q);
    EXPECT_EQ(scalar(held, q), 1);
    tx.commit();
    EXPECT_EQ(scalar(held, q), 0); // transaction-scoped
  }
  // acquire_queue_lock itself.
  db::transaction tx{conn};
  conn.query("SELECT pgmq.acquire_queue_lock($1::text)", q);
  EXPECT_EQ(scalar(held, q), 1);
}

// Upstream's base.sql: detach_archive (SQL-only install: detach_archive does
// nothing)
TEST_F(PgmqCreate, DetachArchiveIsANoOpAndTheArchiveStays) {
  auto q = new_queue();
  auto r = conn.query("SELECT pgmq.detach_archive($1::text)", q);
  ASSERT_EQ(r.rows(), 1);
  EXPECT_EQ(r.text(0, 0), ""); // void
  EXPECT_EQ(scalar("SELECT count(*) FROM pg_tables WHERE schemaname = 'pgmq' AND tablename = $1::text", "a_" + q), 1);
  auto id = send(q, "{\"a\": 1}");
  EXPECT_TRUE(conn.query("SELECT pgmq.archive($1::text, $2::bigint)", q, id).boolean(0, 0));
  EXPECT_EQ(count_rows("a_" + q), 1);
  EXPECT_PG_ERROR(conn.query("SELECT pgmq.detach_archive($1::text)", q + "$"), errc::raise_exception,
                  invalid_chars_msg);
}

// Upstream's base.sql: hyphens and upper case
TEST_F(PgmqCreate, HyphenatedAndUpperCaseNamesWork) {
  auto base = test::unique_name("ph");
  for (auto q : {track(base + "-hyphened"), track(base + "_QueueCased")}) {
    SCOPED_TRACE(q);
    conn.query("SELECT pgmq.create($1::text)", q);
    std::string lower = q;
    std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char c) { return std::tolower(c); });
    EXPECT_EQ(scalar("SELECT count(*) FROM pg_tables WHERE schemaname = 'pgmq' AND tablename IN ($1::text, $2::text)",
                     "q_" + lower, "a_" + lower),
              2);
    // The archive index keeps the raw name.
    EXPECT_EQ(scalar("SELECT count(*) FROM pg_indexes WHERE schemaname = 'pgmq' AND indexname = $1::text",
                     "archived_at_idx_" + q),
              1);
    EXPECT_EQ(scalar("SELECT * FROM pgmq.send($1::text, '{\"hello\": \"world\"}'::jsonb)", q), 1);
    auto m = conn.query("SELECT msg_id, read_ct, message::text FROM pgmq.read($1::text, 1, 1)", q);
    ASSERT_EQ(m.rows(), 1);
    EXPECT_EQ(m.int64(0, 0), 1);
    EXPECT_EQ(m.int64(0, 1), 1);
    EXPECT_EQ(m.text(0, 2), "{\"hello\": \"world\"}");
    EXPECT_TRUE(conn.query("SELECT pgmq.archive($1::text, 1::bigint)", q).boolean(0, 0));
    // metrics echoes the name as passed.
    EXPECT_EQ(conn.query("SELECT queue_name FROM pgmq.metrics($1::text)", q).opt_text(0, 0), q);
  }
  for (auto q : {base + "-hyphened-part", base + "_QueueCasedPart"}) {
    EXPECT_PG_ERROR(conn.query("SELECT pgmq.create_partitioned($1::text)", q), errc::raise_exception, partman_msg);
  }
}

TEST_F(PgmqCreate, CaseVariantsShareTablesButNotMetaRows) {
  auto base = test::unique_name("pc");
  auto upper = track(base + "_ABC");
  auto lower = track(base + "_abc");
  conn.query("SELECT pgmq.create($1::text)", upper);
  conn.query("SELECT pgmq.create($1::text)", lower); // tables exist already
  EXPECT_EQ(scalar("SELECT count(*) FROM pgmq.meta WHERE queue_name IN ($1::text, $2::text)", upper, lower), 2);
  EXPECT_EQ(send(upper), 1);
  EXPECT_EQ(send(lower), 2);
}

// -- queue names ----------------------------------------------------------------

// Upstream's base.sql: name length
TEST_F(PgmqQueueName, AtMost47Characters) {
  auto base = test::unique_name("pln");
  auto name48 = pad_to(base, 48);
  auto name47 = track(pad_to(base, 47));
  EXPECT_PG_ERROR(conn.query("SELECT pgmq.create($1::text)", name48), errc::raise_exception, too_long_msg);
  EXPECT_PG_ERROR(conn.query("SELECT pgmq.create_unlogged($1::text)", name48), errc::raise_exception, too_long_msg);
  EXPECT_PG_ERROR(conn.query("SELECT pgmq.create_non_partitioned($1::text)", name48), errc::raise_exception,
                  too_long_msg);
  EXPECT_PG_ERROR(conn.query("SELECT pgmq.validate_queue_name($1::text)", name48), errc::raise_exception,
                  too_long_msg);
  EXPECT_EQ(objects_named_like(name48), 0);
  conn.query("SELECT pgmq.create($1::text)", name47);
  EXPECT_EQ(objects_named_like(name47), 3);
  EXPECT_EQ(scalar("SELECT count(*) FROM pg_indexes WHERE indexname = $1::text", "archived_at_idx_" + name47), 1);
  EXPECT_EQ(send(name47), 1);
  EXPECT_EQ(conn.query("SELECT total_messages FROM pgmq.metrics($1::text)", name47).int64(0, 0), 1);
  // create_partitioned checks the length before pg_partman.
  auto p48 = pad_to(test::unique_name("plp"), 48, 'p');
  EXPECT_PG_ERROR(conn.query("SELECT pgmq.create_partitioned($1::text)", p48), errc::raise_exception, too_long_msg);
  EXPECT_PG_ERROR(conn.query("SELECT pgmq.create_partitioned($1::text)", p48.substr(0, 47)), errc::raise_exception,
                  partman_msg);
  // The message functions do not check the length.
  EXPECT_PG_ERROR(conn.query("SELECT pgmq.send($1::text, '1'::jsonb)", name48), errc::undefined_table,
                  "relation \"pgmq.q_" + name48 + "\" does not exist");
}

TEST_F(PgmqQueueName, LengthCountsCharactersNotBytes) {
  std::string e_acute = "\xc3\xa9";
  std::string name47, name48;
  for (int i = 0; i < 47; ++i)
    name47 += e_acute;
  name48 = name47 + e_acute;
  EXPECT_NO_THROW(conn.query("SELECT pgmq.validate_queue_name($1::text)", name47));
  EXPECT_PG_ERROR(conn.query("SELECT pgmq.validate_queue_name($1::text)", name48), errc::raise_exception,
                  too_long_msg);
}

TEST_F(PgmqQueueName, BadNamesGiveTheClearErrorAndCreateNothing) {
  auto token = test::unique_name("pbad");
  const std::vector<std::string> bad{
    token + "'quote", token + ";semi", token + "--dash", token + "$dollar",
    token + "a;drop table pgmq.meta", "x'" + token,
  };
  for (auto& name : bad) {
    for (const char* fn : {"create", "create_unlogged", "create_non_partitioned", "create_partitioned"}) {
      SCOPED_TRACE(std::string{fn} + " " + name);
      EXPECT_PG_ERROR(conn.query(std::string{"SELECT pgmq."} + fn + "($1::text)", name), errc::raise_exception,
                      invalid_chars_msg);
    }
  }
  // Too long, alone and together with a bad character (characters win).
  auto too_long = pad_to(token, 60);
  EXPECT_PG_ERROR(conn.query("SELECT pgmq.create($1::text)", too_long), errc::raise_exception, too_long_msg);
  EXPECT_PG_ERROR(conn.query("SELECT pgmq.create($1::text)", too_long + "$"), errc::raise_exception,
                  invalid_chars_msg);
  EXPECT_PG_ERROR(conn.query("SELECT pgmq.create_partitioned($1::text)", too_long + "$"), errc::raise_exception,
                  invalid_chars_msg);
  EXPECT_EQ(objects_named_like(token), 0);
  EXPECT_EQ(scalar("SELECT count(*) FROM pg_class WHERE strpos(relname, $1::text) > 0", token), 0);
  EXPECT_EQ(scalar("SELECT count(*) FROM pg_tables WHERE tablename = 'meta' AND schemaname = 'pgmq'"), 1);
}

// Upstream's base.sql: injection attempt
TEST_F(PgmqQueueName, InjectionAttemptRunsNothing) {
  auto token = test::unique_name("pinj");
  auto evil = "x; CREATE TABLE pgmq." + token + " (id int); --";
  EXPECT_PG_ERROR(conn.query("SELECT pgmq.delete($1::text, 1::bigint)", evil), errc::raise_exception,
                  invalid_chars_msg);
  for (const char* sql : {"SELECT pgmq.send($1::text, '1'::jsonb)", "SELECT * FROM pgmq.read($1::text, 1, 1)",
                          "SELECT pgmq.archive($1::text, 1::bigint)", "SELECT pgmq.purge_queue($1::text)",
                          "SELECT pgmq.drop_queue($1::text)", "SELECT * FROM pgmq.metrics($1::text)",
                          "SELECT * FROM pgmq.pop($1::text)", "SELECT * FROM pgmq.set_vt($1::text, 1, 1)"}) {
    SCOPED_TRACE(sql);
    EXPECT_PG_ERROR(conn.query(sql, evil), errc::raise_exception, invalid_chars_msg);
  }
  EXPECT_EQ(scalar("SELECT count(*) FROM pg_class WHERE strpos(relname, $1::text) > 0", token), 0);
}

// Upstream's base.sql: invalid names on create
TEST_F(PgmqQueueName, DollarSignOnCreateIsRejected) {
  EXPECT_PG_ERROR(conn.exec("SELECT pgmq.create('dollar$-signed')"), errc::raise_exception, invalid_chars_msg);
  EXPECT_PG_ERROR(conn.exec("SELECT pgmq.create_partitioned('dollar$-signed-part')"), errc::raise_exception,
                  invalid_chars_msg);
  EXPECT_EQ(objects_named_like("dollar$"), 0);
}

// Upstream's base.sql: format_table_name, valid names
TEST_F(PgmqQueueName, FormatTableNameOfValidNames) {
  auto r = conn.exec(
    "SELECT pgmq.format_table_name('cat', 'q'), pgmq.format_table_name('cat-dog', 'a'),"
    "       pgmq.format_table_name('cat_dog', 'q'), pgmq.format_table_name('Cat.Dog Bird', 'Q'),"
    "       pgmq.format_table_name('', 'a')");
  EXPECT_EQ(r.text(0, 0), "q_cat");
  EXPECT_EQ(r.text(0, 1), "a_cat-dog");
  EXPECT_EQ(r.text(0, 2), "q_cat_dog");
  EXPECT_EQ(r.text(0, 3), "q_cat.dog bird");
  EXPECT_EQ(r.text(0, 4), "a_");
}

// Upstream's base.sql: format_table_name, invalid names
TEST_F(PgmqQueueName, FormatTableNameOfInvalidNames) {
  for (const char* name : {"dollar$fail", "double--hyphen-fail", "semicolon;fail", "single'quote-fail"}) {
    SCOPED_TRACE(name);
    EXPECT_PG_ERROR(conn.query("SELECT pgmq.format_table_name($1::text, 'q')", name), errc::raise_exception,
                    invalid_chars_msg);
  }
  // The exact text has a backslash before the final quote.
  EXPECT_EQ(std::string{invalid_chars_msg}.substr(std::string{invalid_chars_msg}.size() - 2), "\\'");
}

TEST_F(PgmqQueueName, UnicodeNameIsAcceptedLikePgmq) {
  auto q = track("\xc3\xbc" "n" "\xc3\xaf" "c" "\xc3\xb6" "d" "\xc3\xa9" "_" + test::unique_name("pu")); // "ünïcödé_..."
  conn.query("SELECT pgmq.create($1::text)", q);
  EXPECT_EQ(scalar("SELECT count(*) FROM pgmq.meta WHERE queue_name = $1::text", q), 1);
  EXPECT_EQ(scalar("SELECT count(*) FROM pg_tables WHERE schemaname = 'pgmq' AND tablename IN ('q_' || lower($1::text), 'a_' || lower($1::text))", q), 2);
  EXPECT_EQ(send(q, "{\"x\": \"\xe2\x82\xac\"}"), 1);
  auto m = conn.query("SELECT msg_id, message->>'x' FROM pgmq.read($1::text, 0, 1)", q);
  ASSERT_EQ(m.rows(), 1);
  EXPECT_EQ(m.text(0, 1), "\xe2\x82\xac");
  EXPECT_EQ(conn.query("SELECT queue_length FROM pgmq.metrics($1::text)", q).int64(0, 0), 1);
}

TEST_F(PgmqQueueName, NullNameFails) {
  try {
    conn.exec("SELECT pgmq.create(NULL)");
    ADD_FAILURE() << "NULL queue name accepted";
  } catch (const db::error& e) {
    EXPECT_EQ(std::string{e.what()}, "null values cannot be formatted as an SQL identifier");
  }
}

// -- partitioned queues (no pg_partman here) --------------------------------------

// Upstream's base.sql: create_partitioned variants; partitioned queue without
// pg_partman; partitioned queue with pg_partman; convert_archive_partitioned,
// 46-char name; convert_archive_partitioned, 47-char name
TEST_F(PgmqPartitioned, RequirePgPartman) {
  ASSERT_EQ(conn.exec("SELECT count(*) FROM pg_extension WHERE extname = 'pg_partman'").int64(0, 0), 0);
  auto q = test::unique_name("ppart");
  for (const char* sql :
       {"SELECT pgmq.create_partitioned($1::text)", "SELECT pgmq.create_partitioned($1::text, '2', '2')",
        "SELECT pgmq.create_partitioned($1::text, '5 seconds', '10 seconds')",
        "SELECT pgmq.create_partitioned(queue_name => $1::text, partition_interval => '10 seconds', retention_interval => '20 seconds')",
        "SELECT pgmq.convert_archive_partitioned($1::text)",
        "SELECT pgmq.convert_archive_partitioned(table_name => $1::text, partition_interval => '10000', retention_interval => '100000', leading_partition => 10)"}) {
    SCOPED_TRACE(sql);
    EXPECT_PG_ERROR(conn.query(sql, q), errc::raise_exception, partman_msg);
  }
  EXPECT_PG_ERROR(conn.exec("SELECT pgmq._ensure_pg_partman_installed()"), errc::raise_exception, partman_msg);
  EXPECT_EQ(objects_named_like(q), 0);
  // convert_archive_partitioned of an existing queue changes nothing.
  auto existing = new_queue();
  EXPECT_PG_ERROR(conn.query("SELECT pgmq.convert_archive_partitioned($1::text)", existing), errc::raise_exception,
                  partman_msg);
  EXPECT_EQ(scalar("SELECT count(*) FROM pg_class WHERE relname = $1::text AND relkind = 'r'", "a_" + existing), 1);
}

TEST_F(PgmqPartitioned, Helpers) {
  auto r = conn.exec(
    "SELECT pgmq._get_partition_col('10000'), pgmq._get_partition_col('5 seconds'),"
    "       pgmq._get_partition_col('daily'), pgmq._get_pg_partman_schema() IS NULL,"
    "       pgmq._get_pg_partman_major_version() IS NULL, pgmq._extension_exists('plpgsql'),"
    "       pgmq._extension_exists('pg_partman'), pgmq._belongs_to_pgmq('meta')");
  EXPECT_EQ(r.text(0, 0), "msg_id");
  EXPECT_EQ(r.text(0, 1), "enqueued_at");
  EXPECT_EQ(r.text(0, 2), "enqueued_at");
  EXPECT_TRUE(r.boolean(0, 3));
  EXPECT_TRUE(r.boolean(0, 4));
  EXPECT_TRUE(r.boolean(0, 5));
  EXPECT_FALSE(r.boolean(0, 6));
  // pgmq.meta belongs to the pgmq extension when migrate installed it, and
  // to no extension with our PGMQ-compatible SQL.
  auto extension = conn.exec("SELECT count(*) FROM pg_extension WHERE extname = 'pgmq'").int64(0, 0) > 0;
  EXPECT_EQ(r.boolean(0, 7), extension);
}

// -- sending --------------------------------------------------------------------

TEST_F(PgmqSend, AllOverloadsSetVtAndHeaders) {
  auto q = new_queue();
  auto b = conn.exec("SELECT clock_timestamp()::text").opt_text(0, 0).value();
  // (msg) / (msg, headers) / (msg, delay int) / (msg, delay ts) /
  // (msg, headers, delay int) / (msg, headers, delay ts)
  EXPECT_EQ(scalar("SELECT * FROM pgmq.send($1::text, '1'::jsonb)", q), 1);
  EXPECT_EQ(scalar("SELECT * FROM pgmq.send($1::text, '2'::jsonb, '{\"h\": 2}'::jsonb)", q), 2);
  EXPECT_EQ(scalar("SELECT * FROM pgmq.send($1::text, '3'::jsonb, 100)", q), 3);
  EXPECT_EQ(scalar("SELECT * FROM pgmq.send($1::text, '4'::jsonb, '2100-01-01 00:00:00+00'::timestamptz)", q), 4);
  EXPECT_EQ(scalar("SELECT * FROM pgmq.send($1::text, '5'::jsonb, '{\"h\": 5}'::jsonb, 200)", q), 5);
  EXPECT_EQ(scalar("SELECT * FROM pgmq.send($1::text, '6'::jsonb, '{\"h\": 6}'::jsonb, '2100-01-02 00:00:00+00'::timestamptz)", q), 6);
  auto after = conn.exec("SELECT clock_timestamp()::text").opt_text(0, 0).value();
  auto r = conn.query(
    "SELECT msg_id, message::text, headers::text, read_ct,"
    "       CASE msg_id"
    "         WHEN 1 THEN vt BETWEEN $1::timestamptz AND $2::timestamptz"
    "         WHEN 2 THEN vt BETWEEN $1::timestamptz AND $2::timestamptz"
    "         WHEN 3 THEN vt BETWEEN $1::timestamptz + interval '100 s' AND $2::timestamptz + interval '100 s'"
    "         WHEN 4 THEN vt = '2100-01-01 00:00:00+00'"
    "         WHEN 5 THEN vt BETWEEN $1::timestamptz + interval '200 s' AND $2::timestamptz + interval '200 s'"
    "         WHEN 6 THEN vt = '2100-01-02 00:00:00+00'"
    "       END"
    "  FROM pgmq.q_" + q + " ORDER BY msg_id",
    b, after);
  ASSERT_EQ(r.rows(), 6);
  const std::vector<std::optional<std::string>> headers{
    std::nullopt, "{\"h\": 2}", std::nullopt, std::nullopt, "{\"h\": 5}", "{\"h\": 6}"};
  for (int i = 0; i < 6; ++i) {
    SCOPED_TRACE(i + 1);
    EXPECT_EQ(r.int64(i, 0), i + 1);
    EXPECT_EQ(r.text(i, 1), std::to_string(i + 1));
    EXPECT_EQ(r.opt_text(i, 2), headers[i]);
    EXPECT_EQ(r.int64(i, 3), 0);
    EXPECT_TRUE(r.boolean(i, 4));
  }
  // Only the two immediate ones are visible.
  EXPECT_EQ(read_ids(q, 0, 10), (std::vector<int64_t>{1, 2}));
}

TEST_F(PgmqSend, ResultColumnIsNamedSend) {
  auto q = new_queue();
  auto r = conn.query("SELECT * FROM pgmq.send($1::text, '{}'::jsonb)", q);
  EXPECT_EQ(r.column_name(0), "send");
  auto b = conn.query("SELECT * FROM pgmq.send_batch($1::text, ARRAY['{}']::jsonb[])", q);
  EXPECT_EQ(b.column_name(0), "send_batch");
  EXPECT_EQ(conn.query("SELECT send AS msg_id FROM pgmq.send($1::text, '{}'::jsonb)", q).int64(0, 0), 3);
}

TEST_F(PgmqSend, NamedNotationLikePgmqRs) {
  auto q = track(test::unique_name("pnn"));
  conn.query("SELECT pgmq.create(queue_name => $1::text)", q);
  EXPECT_EQ(scalar("SELECT * FROM pgmq.send(queue_name => $1::text, msg => '{\"a\": 1}'::jsonb, delay => 0::integer)", q), 1);
  EXPECT_EQ(scalar("SELECT * FROM pgmq.send(queue_name => $1::text, msg => '{\"a\": 2}'::jsonb, headers => '{}'::jsonb, delay => 0::integer)", q), 2);
  EXPECT_EQ(ints(conn.query("SELECT * FROM pgmq.send_batch(queue_name => $1::text, msgs => ARRAY['3', '4']::jsonb[], delay => 0::integer)", q)),
            (std::vector<int64_t>{3, 4}));
  EXPECT_EQ(ints(conn.query("SELECT msg_id FROM pgmq.read(queue_name => $1::text, vt => 30, qty => 2)", q)),
            (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(ints(conn.query("SELECT msg_id FROM pgmq.read_with_poll(queue_name => $1::text, vt => 30, qty => 1, max_poll_seconds => 1, poll_interval_ms => 10)", q)),
            (std::vector<int64_t>{3}));
  EXPECT_EQ(ints(conn.query("SELECT msg_id FROM pgmq.set_vt(queue_name => $1::text, msg_id => 1::bigint, vt => 0)", q)),
            (std::vector<int64_t>{1}));
  EXPECT_TRUE(conn.query("SELECT pgmq.delete(queue_name => $1::text, msg_id => 1::bigint)", q).boolean(0, 0));
  EXPECT_TRUE(conn.query("SELECT pgmq.archive(queue_name => $1::text, msg_id => 2::bigint)", q).boolean(0, 0));
  EXPECT_EQ(ints(conn.query("SELECT * FROM pgmq.archive(queue_name => $1::text, msg_ids => ARRAY[3]::bigint[])", q)),
            (std::vector<int64_t>{3}));
  EXPECT_EQ(ints(conn.query("SELECT * FROM pgmq.delete(queue_name => $1::text, msg_ids => ARRAY[4]::bigint[])", q)),
            (std::vector<int64_t>{4}));
  EXPECT_TRUE(conn.query("SELECT pgmq.drop_queue(queue_name => $1::text)", q).boolean(0, 0));
}

// Upstream's base.sql: NULL message
TEST_F(PgmqSend, NullMessage) {
  auto q = new_queue();
  EXPECT_EQ(scalar("SELECT * FROM pgmq.send($1::text, NULL::jsonb)", q), 1);
  auto m = conn.query("SELECT msg_id, read_ct, message FROM pgmq.read($1::text, 1, 1)", q);
  ASSERT_EQ(m.rows(), 1);
  EXPECT_EQ(m.int64(0, 0), 1);
  EXPECT_EQ(m.int64(0, 1), 1);
  EXPECT_TRUE(m.is_null(0, 2));
}

TEST_F(PgmqSend, NegativeDelayIsVisibleAtOnce) {
  auto q = new_queue();
  EXPECT_EQ(scalar("SELECT * FROM pgmq.send($1::text, '1'::jsonb, -10)", q), 1);
  EXPECT_EQ(scalar("SELECT count(*) FROM pgmq.q_" + q + " WHERE vt < now()"), 1);
  EXPECT_EQ(ints(conn.query("SELECT * FROM pgmq.send_batch($1::text, ARRAY['2']::jsonb[], -5)", q)),
            std::vector<int64_t>{2});
  EXPECT_EQ(read_ids(q, 10, 10), (std::vector<int64_t>{1, 2}));
}

TEST_F(PgmqSend, NullTimestampDelayViolatesNotNull) {
  auto q = new_queue();
  try {
    conn.query("SELECT * FROM pgmq.send($1::text, '1'::jsonb, NULL::timestamptz)", q);
    ADD_FAILURE() << "NULL vt accepted";
  } catch (const db::error& e) {
    EXPECT_EQ(e.sqlstate(), "23502");
  }
}

TEST_F(PgmqSend, UntypedThirdArgumentIsAmbiguous) {
  auto q = new_queue();
  try {
    conn.exec("SELECT * FROM pgmq.send('" + q + "', '1', NULL)");
    ADD_FAILURE() << "ambiguous call resolved";
  } catch (const db::error& e) {
    EXPECT_EQ(e.sqlstate(), "42725");
    EXPECT_EQ(std::string{e.what()}, "function pgmq.send(unknown, unknown, unknown) is not unique");
  }
  // An integer literal picks the integer overload.
  EXPECT_EQ(conn.exec("SELECT * FROM pgmq.send('" + q + "', '1', 0)").int64(0, 0), 1);
}

TEST_F(PgmqSend, EnqueuedAtIsTransactionStartAndIdsAreNotReused) {
  auto q = new_queue();
  {
    db::transaction tx{conn};
    auto start = conn.exec("SELECT now()::text").opt_text(0, 0).value();
    conn.exec("SELECT pg_sleep(0.05)");
    auto id = send(q);
    EXPECT_EQ(id, 1);
    EXPECT_EQ(scalar("SELECT count(*) FROM pgmq.q_" + q + " WHERE enqueued_at = $1::timestamptz AND vt > enqueued_at", start),
              1);
  } // rolled back: id 1 is gone for good
  EXPECT_EQ(send(q), 2);
  EXPECT_EQ(conn.query("SELECT total_messages FROM pgmq.metrics($1::text)", q).int64(0, 0), 2);
}

TEST_F(PgmqSend, UnknownQueueIsUndefinedTable) {
  auto q = test::unique_name("pnone");
  auto msg = "relation \"pgmq.q_" + q + "\" does not exist";
  EXPECT_PG_ERROR(conn.query("SELECT * FROM pgmq.send($1::text, '1'::jsonb)", q), errc::undefined_table, msg);
  EXPECT_PG_ERROR(conn.query("SELECT * FROM pgmq.send_batch($1::text, ARRAY['1']::jsonb[])", q), errc::undefined_table, msg);
  EXPECT_PG_ERROR(conn.query("SELECT * FROM pgmq.read($1::text, 1, 1)", q), errc::undefined_table, msg);
  EXPECT_PG_ERROR(conn.query("SELECT * FROM pgmq.read_with_poll($1::text, 1, 1, 1, 10)", q), errc::undefined_table, msg);
  EXPECT_PG_ERROR(conn.query("SELECT * FROM pgmq.pop($1::text)", q), errc::undefined_table, msg);
  EXPECT_PG_ERROR(conn.query("SELECT * FROM pgmq.set_vt($1::text, 1, 1)", q), errc::undefined_table, msg);
  EXPECT_PG_ERROR(conn.query("SELECT pgmq.delete($1::text, 1::bigint)", q), errc::undefined_table, msg);
  EXPECT_PG_ERROR(conn.query("SELECT * FROM pgmq.delete($1::text, ARRAY[1]::bigint[])", q), errc::undefined_table, msg);
  EXPECT_PG_ERROR(conn.query("SELECT pgmq.archive($1::text, 1::bigint)", q), errc::undefined_table, msg);
  EXPECT_PG_ERROR(conn.query("SELECT pgmq.purge_queue($1::text)", q), errc::undefined_table, msg);
  EXPECT_PG_ERROR(conn.query("SELECT * FROM pgmq.metrics($1::text)", q), errc::undefined_table, msg);
  auto hyphen = q + "-x";
  EXPECT_PG_ERROR(conn.query("SELECT * FROM pgmq.send($1::text, '1'::jsonb)", hyphen), errc::undefined_table,
                  "relation \"pgmq.q_" + hyphen + "\" does not exist");
}

// Upstream's base.sql: send_batch with headers
TEST_F(PgmqSendBatch, WithHeaders) {
  auto q = new_queue();
  EXPECT_EQ(ints(conn.query("SELECT * FROM pgmq.send_batch($1::text, ARRAY['{\"hello\": \"world_0\"}', '{\"hello\": \"world_1\"}']::jsonb[],"
                            " ARRAY['{\"header\": 1}', '{\"header\": 2}']::jsonb[])", q)),
            (std::vector<int64_t>{1, 2}));
  auto m = conn.query("SELECT msg_id, message::text, headers::text FROM pgmq.read($1::text, 0, 2)", q);
  ASSERT_EQ(m.rows(), 2);
  EXPECT_EQ(m.int64(0, 0), 1);
  EXPECT_EQ(m.text(0, 1), "{\"hello\": \"world_0\"}");
  EXPECT_EQ(m.text(0, 2), "{\"header\": 1}");
  EXPECT_EQ(m.int64(1, 0), 2);
  EXPECT_EQ(m.text(1, 1), "{\"hello\": \"world_1\"}");
  EXPECT_EQ(m.text(1, 2), "{\"header\": 2}");
}

// Upstream's base.sql: send_batch with a timestamptz delay
TEST_F(PgmqSendBatch, WithTimestampDelay) {
  auto q = new_queue();
  EXPECT_EQ(ints(conn.query("SELECT * FROM pgmq.send_batch($1::text, ARRAY['1', '2']::jsonb[], CURRENT_TIMESTAMP + interval '5 seconds')", q)),
            (std::vector<int64_t>{1, 2}));
  EXPECT_TRUE(read_ids(q, 0, 10).empty());
  EXPECT_EQ(scalar("SELECT count(DISTINCT vt) FROM pgmq.q_" + q), 1);
}

TEST_F(PgmqSendBatch, AllOverloadsAndOneVtPerBatch) {
  auto q = new_queue();
  EXPECT_EQ(ints(conn.query("SELECT * FROM pgmq.send_batch($1::text, ARRAY['1', '2', '3']::jsonb[])", q)),
            (std::vector<int64_t>{1, 2, 3}));
  EXPECT_EQ(ints(conn.query("SELECT * FROM pgmq.send_batch($1::text, ARRAY['4', '5']::jsonb[], 100)", q)),
            (std::vector<int64_t>{4, 5}));
  EXPECT_EQ(ints(conn.query("SELECT * FROM pgmq.send_batch($1::text, ARRAY['6']::jsonb[], '2100-01-01 00:00:00+00'::timestamptz)", q)),
            (std::vector<int64_t>{6}));
  EXPECT_EQ(ints(conn.query("SELECT * FROM pgmq.send_batch($1::text, ARRAY['7', '8']::jsonb[], ARRAY['{\"h\": 7}', '{\"h\": 8}']::jsonb[], 100)", q)),
            (std::vector<int64_t>{7, 8}));
  EXPECT_EQ(ints(conn.query("SELECT * FROM pgmq.send_batch($1::text, ARRAY['9']::jsonb[], ARRAY['{\"h\": 9}']::jsonb[], '2100-01-01 00:00:00+00'::timestamptz)", q)),
            (std::vector<int64_t>{9}));
  EXPECT_EQ(ints(conn.query("SELECT * FROM pgmq.send_batch($1::text, ARRAY[]::jsonb[])", q)), std::vector<int64_t>{});
  auto r = conn.query(
    "SELECT string_agg(msg_id || ':' || message::text || ':' || coalesce(headers::text, '-') || ':' || read_ct, ' ' ORDER BY msg_id),"
    "       count(DISTINCT vt) FILTER (WHERE msg_id BETWEEN 1 AND 3),"
    "       count(DISTINCT vt) FILTER (WHERE msg_id BETWEEN 4 AND 5),"
    "       bool_and(vt > now() + interval '90 s') FILTER (WHERE msg_id IN (4, 5, 7, 8)),"
    "       bool_and(vt = '2100-01-01 00:00:00+00') FILTER (WHERE msg_id IN (6, 9))"
    "  FROM pgmq.q_" + q);
  EXPECT_EQ(r.text(0, 0), "1:1:-:0 2:2:-:0 3:3:-:0 4:4:-:0 5:5:-:0 6:6:-:0 7:7:{\"h\": 7}:0 8:8:{\"h\": 8}:0 9:9:{\"h\": 9}:0");
  EXPECT_EQ(r.int64(0, 1), 1);
  EXPECT_EQ(r.int64(0, 2), 1);
  EXPECT_TRUE(r.boolean(0, 3));
  EXPECT_TRUE(r.boolean(0, 4));
}

TEST_F(PgmqSendBatch, HeadersArraysOfUnequalLength) {
  auto q = new_queue();
  // Shorter headers: the rest are NULL.
  EXPECT_EQ(ints(conn.query("SELECT * FROM pgmq.send_batch($1::text, ARRAY['\"a\"', '\"b\"', '\"c\"']::jsonb[], ARRAY['{\"h\": 1}']::jsonb[])", q)),
            (std::vector<int64_t>{1, 2, 3}));
  // NULL headers array: all NULL.
  EXPECT_EQ(ints(conn.query("SELECT * FROM pgmq.send_batch($1::text, ARRAY['\"d\"']::jsonb[], NULL::jsonb[])", q)),
            (std::vector<int64_t>{4}));
  // Longer headers: extra rows with a NULL message (upstream quirk).
  EXPECT_EQ(ints(conn.query("SELECT * FROM pgmq.send_batch($1::text, ARRAY['\"e\"']::jsonb[], ARRAY['{\"h\": 5}', '{\"h\": 6}']::jsonb[], 0)", q)),
            (std::vector<int64_t>{5, 6}));
  auto r = conn.query(
    "SELECT string_agg(msg_id || ':' || coalesce(message::text, '-') || ':' || coalesce(headers::text, '-'), ' ' ORDER BY msg_id)"
    "  FROM pgmq.q_" + q);
  EXPECT_EQ(r.text(0, 0), "1:\"a\":{\"h\": 1} 2:\"b\":- 3:\"c\":- 4:\"d\":- 5:\"e\":{\"h\": 5} 6:-:{\"h\": 6}");
}

TEST_F(PgmqSendBatch, LargeBatchKeepsArrayOrder) {
  auto q = new_queue();
  auto r = conn.query(
    "SELECT * FROM pgmq.send_batch($1::text, (SELECT array_agg(to_jsonb(g) ORDER BY g) FROM generate_series(1, 1000) g))", q);
  EXPECT_EQ(ints(r), range(1, 1000));
  EXPECT_EQ(scalar("SELECT count(*) FROM pgmq.q_" + q + " WHERE message <> to_jsonb(msg_id)"), 0);
}

// -- reading ----------------------------------------------------------------------

// Upstream's base.sql: read with vt 0
TEST_F(PgmqRead, VtZeroAndConditional) {
  auto q = new_queue();
  EXPECT_EQ(scalar("SELECT * FROM pgmq.send($1::text, '{\"hello\": \"world\"}'::jsonb)", q), 1);
  EXPECT_EQ(read_ids(q, 0, 1), std::vector<int64_t>{1});
  auto m = conn.query("SELECT msg_id, read_ct FROM pgmq.read($1::text, 2, 1, '{\"hello\": \"world\"}'::jsonb)", q);
  ASSERT_EQ(m.rows(), 1);
  EXPECT_EQ(m.int64(0, 0), 1);
  EXPECT_EQ(m.int64(0, 1), 2);
}

TEST_F(PgmqRead, ConditionalFiltersByContainment) {
  auto q = new_queue();
  conn.query("SELECT * FROM pgmq.send_batch($1::text, ARRAY['{\"k\": 1, \"x\": true}', '{\"k\": 2}', '{\"k\": 1}']::jsonb[])", q);
  EXPECT_EQ(ints(conn.query("SELECT msg_id FROM pgmq.read($1::text, 0, 10, '{\"k\": 1}'::jsonb)", q)),
            (std::vector<int64_t>{1, 3}));
  EXPECT_EQ(ints(conn.query("SELECT msg_id FROM pgmq.read($1::text, 0, 10, '{\"k\": 3}'::jsonb)", q)),
            std::vector<int64_t>{});
  // NULL and '{}' mean no filter.
  EXPECT_EQ(ints(conn.query("SELECT msg_id FROM pgmq.read($1::text, 0, 10, NULL::jsonb)", q)),
            (std::vector<int64_t>{1, 2, 3}));
  EXPECT_EQ(ints(conn.query("SELECT msg_id FROM pgmq.read($1::text, 0, 10, '{}'::jsonb)", q)),
            (std::vector<int64_t>{1, 2, 3}));
}

// Upstream's base.sql: read and qty
TEST_F(PgmqRead, QtyAndInvisibility) {
  auto q = new_queue();
  EXPECT_EQ(send(q), 1);
  EXPECT_EQ(send(q), 2);
  EXPECT_EQ(send(q), 3);
  EXPECT_EQ(read_ids(q, 5, 1), std::vector<int64_t>{1});
  EXPECT_EQ(read_ids(q, 10, 5), (std::vector<int64_t>{2, 3}));
  EXPECT_TRUE(read_ids(q, 10, 5).empty());
}

TEST_F(PgmqRead, ReturnsAllColumnsUpdatedAndAscending) {
  auto q = new_queue();
  conn.query("SELECT * FROM pgmq.send_batch($1::text, (SELECT array_agg(to_jsonb(g)) FROM generate_series(1, 40) g))", q);
  // Shuffle the physical order: hide some, read others, make all visible.
  conn.query("SELECT * FROM pgmq.read($1::text, 0, 7)", q);
  for (int id : {3, 17, 29, 8, 40, 1})
    conn.query("SELECT * FROM pgmq.set_vt($1::text, $2::bigint, 0)", q, id);
  conn.query("SELECT * FROM pgmq.read($1::text, 0, 40, '{}'::jsonb)", q);
  auto r = conn.query("SELECT *, vt > clock_timestamp() + interval '25 s', vt < clock_timestamp() + interval '31 s' FROM pgmq.read($1::text, 30, 40)", q);
  ASSERT_EQ(r.columns(), 8);
  for (int c = 0; c < 6; ++c)
    EXPECT_EQ(r.column_name(c), (std::vector<std::string>{"msg_id", "read_ct", "enqueued_at", "vt", "message", "headers"})[c]);
  EXPECT_EQ(ints(r), range(1, 40));
  for (int i = 0; i < r.rows(); ++i) {
    auto id = r.int64(i, 0);
    EXPECT_EQ(r.int64(i, 1), id <= 7 ? 3 : 2) << id;
    EXPECT_EQ(r.text(i, 4), std::to_string(id));
    EXPECT_TRUE(r.is_null(i, 5));
    EXPECT_TRUE(r.boolean(i, 6));
    EXPECT_TRUE(r.boolean(i, 7));
  }
  // The table holds what read returned.
  EXPECT_EQ(scalar("SELECT count(*) FROM pgmq.q_" + q + " WHERE vt > now() + interval '20 s'"), 40);
}

TEST_F(PgmqRead, EmptyQueueReturnsNoRows) {
  auto q = new_queue();
  auto r = conn.query("SELECT * FROM pgmq.read($1::text, 10, 5)", q);
  EXPECT_EQ(r.rows(), 0);
  EXPECT_EQ(r.columns(), 6);
}

// Upstream's base.sql: set_vt and polling (shortened: 1 s instead of 5 s)
TEST_F(PgmqReadWithPoll, WaitsForSetVtToExpire) {
  auto q = new_queue();
  EXPECT_EQ(send(q, "{\"hello\": \"world\"}"), 1);
  auto sv = conn.query("SELECT msg_id, vt > clock_timestamp() + interval '0.5 s' FROM pgmq.set_vt($1::text, 1, 1)", q);
  ASSERT_EQ(sv.rows(), 1);
  EXPECT_TRUE(sv.boolean(0, 1));
  EXPECT_TRUE(read_ids(q, 2, 1).empty());
  auto start = clock_type::now();
  auto r = conn.query("SELECT msg_id FROM pgmq.read_with_poll($1::text, 10, 1, 10)", q);
  auto waited = seconds_since(start);
  EXPECT_EQ(ints(r), std::vector<int64_t>{1});
  EXPECT_GT(waited, 0.3);
  EXPECT_LT(waited, 5.0);
}

// Upstream's base.sql: polling with a conditional (shortened)
TEST_F(PgmqReadWithPoll, WithConditional) {
  auto q = new_queue();
  send(q, "{\"hello\": \"world\"}");
  conn.query("SELECT * FROM pgmq.set_vt($1::text, 1, 1)", q);
  auto r = conn.query("SELECT msg_id FROM pgmq.read_with_poll($1::text, 10, 1, 10, 100, '{\"hello\": \"world\"}'::jsonb)", q);
  EXPECT_EQ(ints(r), std::vector<int64_t>{1});
  // A non-matching conditional times out.
  conn.query("SELECT * FROM pgmq.set_vt($1::text, 1, 0)", q);
  auto start = clock_type::now();
  r = conn.query("SELECT msg_id FROM pgmq.read_with_poll($1::text, 10, 1, 1, 50, '{\"hello\": \"mars\"}'::jsonb)", q);
  EXPECT_EQ(r.rows(), 0);
  EXPECT_GT(seconds_since(start), 0.8);
}

// Upstream's base.sql: send with a timestamptz delay (shortened)
TEST_F(PgmqReadWithPoll, WaitsForTimestampDelay) {
  auto q = new_queue();
  EXPECT_EQ(scalar("SELECT * FROM pgmq.send($1::text, '{\"hello\": \"world\"}'::jsonb, clock_timestamp() + interval '1 second')", q), 1);
  EXPECT_TRUE(read_ids(q, 2, 1).empty());
  auto start = clock_type::now();
  auto r = conn.query("SELECT msg_id FROM pgmq.read_with_poll($1::text, 10, 1, 10)", q);
  auto waited = seconds_since(start);
  EXPECT_EQ(ints(r), std::vector<int64_t>{1});
  EXPECT_GT(waited, 0.3);
  EXPECT_LT(waited, 5.0);
}

// Upstream's base.sql: read_with_poll timing (shortened)
TEST_F(PgmqReadWithPoll, ReturnsOnlyWhatBecameVisible) {
  auto q = new_queue();
  EXPECT_EQ(scalar("SELECT * FROM pgmq.send($1::text, '1'::jsonb, 1)", q), 1);
  EXPECT_EQ(scalar("SELECT * FROM pgmq.send($1::text, '2'::jsonb, 100)", q), 2);
  auto start = clock_type::now();
  auto r = conn.query("SELECT msg_id, read_ct FROM pgmq.read_with_poll($1::text, 10, 5, 6, 100)", q);
  auto waited = seconds_since(start);
  EXPECT_EQ(ints(r), std::vector<int64_t>{1});
  EXPECT_EQ(r.int64(0, 1), 1);
  EXPECT_GT(waited, 0.3);
  EXPECT_LT(waited, 5.0);
}

TEST_F(PgmqReadWithPoll, TimesOutEmptyAndZeroMaxNeverReads) {
  auto q = new_queue();
  auto start = clock_type::now();
  auto r = conn.query("SELECT * FROM pgmq.read_with_poll($1::text, 10, 5, 1, 100)", q);
  auto waited = seconds_since(start);
  EXPECT_EQ(r.rows(), 0);
  EXPECT_EQ(r.columns(), 6);
  EXPECT_GT(waited, 0.9);
  EXPECT_LT(waited, 4.0);
  // max_poll_seconds <= 0 returns nothing without reading (quirk).
  send(q);
  EXPECT_EQ(conn.query("SELECT * FROM pgmq.read_with_poll($1::text, 10, 5, 0, 100)", q).rows(), 0);
  EXPECT_EQ(scalar("SELECT read_ct FROM pgmq.q_" + q), 0);
  // Visible messages come back at once.
  start = clock_type::now();
  EXPECT_EQ(ints(conn.query("SELECT msg_id FROM pgmq.read_with_poll($1::text, 10, 5)", q)), std::vector<int64_t>{1});
  EXPECT_LT(seconds_since(start), 1.0);
}

TEST_F(PgmqReadWithPoll, SeesMessagesCommittedWhilePolling) {
  auto q = new_queue();
  std::thread sender([&] {
    auto other = test::connect();
    std::this_thread::sleep_for(std::chrono::milliseconds(300)); // the scenario is about time
    other.query("SELECT * FROM pgmq.send($1::text, '7'::jsonb)", q);
  });
  auto start = clock_type::now();
  auto r = conn.query("SELECT msg_id FROM pgmq.read_with_poll($1::text, 10, 5, 5, 20)", q);
  sender.join();
  EXPECT_EQ(ints(r), std::vector<int64_t>{1});
  EXPECT_LT(seconds_since(start), 4.0);
}

// Upstream's base.sql: pop
TEST_F(PgmqPop, DeletesAndReturnsTheOldestVisible) {
  auto q = new_queue();
  auto empty = conn.query("SELECT * FROM pgmq.pop($1::text)", q);
  EXPECT_EQ(empty.rows(), 0);
  ASSERT_EQ(empty.columns(), 6);
  for (int c = 0; c < 6; ++c)
    EXPECT_EQ(empty.column_name(c), (std::vector<std::string>{"msg_id", "read_ct", "enqueued_at", "vt", "message", "headers"})[c]);
  send(q, "1");
  send(q, "2");
  send(q, "3");
  auto vt1 = conn.query("SELECT vt::text FROM pgmq.q_" + q + " WHERE msg_id = 1").opt_text(0, 0).value();
  auto r = conn.query("SELECT msg_id, read_ct, vt::text, message::text FROM pgmq.pop($1::text)", q);
  ASSERT_EQ(r.rows(), 1);
  EXPECT_EQ(r.int64(0, 0), 1);
  EXPECT_EQ(r.int64(0, 1), 0);  // not incremented
  EXPECT_EQ(r.text(0, 2), vt1); // old vt
  EXPECT_EQ(r.text(0, 3), "1");
  EXPECT_EQ(count_rows("q_" + q), 2);
  EXPECT_EQ(count_rows("a_" + q), 0); // not archived
  // Invisible messages are skipped.
  conn.query("SELECT * FROM pgmq.set_vt($1::text, 2, 100)", q);
  EXPECT_EQ(ints(conn.query("SELECT msg_id FROM pgmq.pop($1::text)", q)), std::vector<int64_t>{3});
  EXPECT_EQ(conn.query("SELECT * FROM pgmq.pop($1::text)", q).rows(), 0);
}

// Upstream's base.sql: set_vt on a missing id; set_vt hides and reveals;
// set_vt(…, 0)
TEST_F(PgmqSetVt, MissingIdGivesNoRows) {
  auto q = new_queue();
  auto r = conn.query("SELECT * FROM pgmq.set_vt($1::text, 9999, 0)", q);
  EXPECT_EQ(r.rows(), 0);
  EXPECT_EQ(r.columns(), 6);
}

TEST_F(PgmqSetVt, HidesAndReveals) {
  auto q = new_queue();
  auto id = send(q, "{\"a\": 1}");
  auto r = conn.query("SELECT msg_id, read_ct, message::text, vt > clock_timestamp() + interval '95 s' FROM pgmq.set_vt($1::text, $2::bigint, 100)", q, id);
  ASSERT_EQ(r.rows(), 1);
  EXPECT_EQ(r.int64(0, 0), id);
  EXPECT_EQ(r.int64(0, 1), 0); // unchanged
  EXPECT_EQ(r.text(0, 2), "{\"a\": 1}");
  EXPECT_TRUE(r.boolean(0, 3)); // the updated row is returned
  EXPECT_TRUE(read_ids(q, 10, 1).empty());
  EXPECT_EQ(ints(conn.query("SELECT msg_id FROM pgmq.set_vt($1::text, $2::bigint, 0)", q, id)), std::vector<int64_t>{id});
  auto m = conn.query("SELECT msg_id, read_ct FROM pgmq.read($1::text, 0, 1)", q);
  ASSERT_EQ(m.rows(), 1);
  EXPECT_EQ(m.int64(0, 0), id);
  EXPECT_EQ(m.int64(0, 1), 1);
  // Upstream's base.sql, set_vt(…, 0): with vt 0 after a read, the next read
  // gets it again.
  EXPECT_EQ(ints(conn.query("SELECT msg_id FROM pgmq.set_vt($1::text, $2::bigint, 0)", q, id)), std::vector<int64_t>{id});
  EXPECT_EQ(read_ids(q, 0, 1), std::vector<int64_t>{id});
}

// -- delete / archive ------------------------------------------------------------

TEST_F(PgmqDelete, SingleAndArray) {
  auto q = new_queue();
  conn.query("SELECT * FROM pgmq.send_batch($1::text, ARRAY['1', '2', '3', '4', '5']::jsonb[])", q);
  EXPECT_TRUE(conn.query("SELECT pgmq.delete($1::text, 1::bigint)", q).boolean(0, 0));
  EXPECT_FALSE(conn.query("SELECT pgmq.delete($1::text, 1::bigint)", q).boolean(0, 0));
  auto deleted = ints(conn.query("SELECT * FROM pgmq.delete($1::text, ARRAY[1, 2, 4, 99, -1]::bigint[])", q));
  std::sort(deleted.begin(), deleted.end());
  EXPECT_EQ(deleted, (std::vector<int64_t>{2, 4}));
  EXPECT_EQ(conn.query("SELECT * FROM pgmq.delete($1::text, ARRAY[]::bigint[])", q).rows(), 0);
  // Visibility does not matter for delete.
  conn.query("SELECT * FROM pgmq.set_vt($1::text, 3, 100)", q);
  EXPECT_TRUE(conn.query("SELECT pgmq.delete($1::text, 3::bigint)", q).boolean(0, 0));
  EXPECT_EQ(count_rows("q_" + q), 1);
  EXPECT_EQ(count_rows("a_" + q), 0);
  EXPECT_EQ(conn.query("SELECT * FROM pgmq.delete($1::text, ARRAY[5]::bigint[])", q).column_name(0), "delete");
}

// Upstream's base.sql: archive with headers; single archive
TEST_F(PgmqArchive, ArrayThenSingleKeepHeaders) {
  auto q = new_queue();
  EXPECT_EQ(count_rows("q_" + q), 0);
  EXPECT_EQ(count_rows("a_" + q), 0);
  EXPECT_EQ(scalar("SELECT * FROM pgmq.send($1::text, '0'::jsonb, '{\"headers\": 1}'::jsonb)", q), 1);
  EXPECT_EQ(scalar("SELECT * FROM pgmq.send($1::text, '0'::jsonb)", q), 2);
  auto archived = ints(conn.query("SELECT * FROM pgmq.archive($1::text, ARRAY[1, 2]::bigint[])", q));
  std::sort(archived.begin(), archived.end());
  EXPECT_EQ(archived, (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(count_rows("q_" + q), 0);
  EXPECT_EQ(count_rows("a_" + q), 2);
  EXPECT_EQ(send(q, "0"), 3);
  EXPECT_TRUE(conn.query("SELECT pgmq.archive($1::text, 3::bigint)", q).boolean(0, 0));
  EXPECT_FALSE(conn.query("SELECT pgmq.archive($1::text, 3::bigint)", q).boolean(0, 0));
  EXPECT_EQ(count_rows("q_" + q), 0);
  EXPECT_EQ(count_rows("a_" + q), 3);
  auto r = conn.query(
    "SELECT string_agg(msg_id || ':' || message::text || ':' || coalesce(headers::text, '-'), ' ' ORDER BY msg_id)"
    "  FROM pgmq.a_" + q);
  EXPECT_EQ(r.text(0, 0), "1:0:{\"headers\": 1} 2:0:- 3:0:-");
}

TEST_F(PgmqArchive, CopiesEveryColumn) {
  auto q = new_queue();
  send(q, "{\"k\": 1}");
  conn.query("SELECT * FROM pgmq.read($1::text, 100, 1)", q);
  conn.query("SELECT * FROM pgmq.set_vt($1::text, 1, 200)", q);
  auto before = conn.query("SELECT msg_id, read_ct, enqueued_at::text, vt::text, message::text FROM pgmq.q_" + q);
  {
    db::transaction tx{conn};
    EXPECT_TRUE(conn.query("SELECT pgmq.archive($1::text, 1::bigint)", q).boolean(0, 0));
    EXPECT_EQ(scalar("SELECT count(*) FROM pgmq.a_" + q + " WHERE archived_at = now()"), 1);
    tx.commit();
  }
  auto after = conn.query("SELECT msg_id, read_ct, enqueued_at::text, vt::text, message::text FROM pgmq.a_" + q);
  ASSERT_EQ(after.rows(), 1);
  for (int c = 0; c < 5; ++c)
    EXPECT_EQ(after.text(0, c), before.text(0, c)) << c;
  EXPECT_EQ(after.int64(0, 1), 1);
}

// Upstream's base.sql: partitioned queue with pg_partman (the non-partitioned
// part: {1,2,3,-3} with 3 deleted gives {1,2})
TEST_F(PgmqArchive, ArrayReturnsOnlyMovedIds) {
  auto q = new_queue();
  conn.query("SELECT * FROM pgmq.send_batch($1::text, ARRAY['1', '2', '3']::jsonb[])", q);
  EXPECT_EQ(scalar("SELECT queue_length FROM pgmq.metrics($1::text)", q), 3);
  EXPECT_TRUE(conn.query("SELECT pgmq.delete($1::text, 3::bigint)", q).boolean(0, 0));
  EXPECT_EQ(scalar("SELECT queue_length FROM pgmq.metrics($1::text)", q), 2);
  auto archived = conn.query("SELECT * FROM pgmq.archive($1::text, ARRAY[1, 2, 3, -3]::bigint[])", q);
  EXPECT_EQ(archived.column_name(0), "archive");
  auto ids = ints(archived);
  std::sort(ids.begin(), ids.end());
  EXPECT_EQ(ids, (std::vector<int64_t>{1, 2}));
}

// -- purge / drop ------------------------------------------------------------------

// Upstream's base.sql: purge
TEST_F(PgmqPurge, EmptiesTheQueueButNotTheArchiveOrSequence) {
  auto q = new_queue();
  EXPECT_EQ(ints(conn.query("SELECT * FROM pgmq.send_batch($1::text, ARRAY['1', '2', '3', '4', '5', '6']::jsonb[])", q)), range(1, 6));
  EXPECT_TRUE(conn.query("SELECT pgmq.archive($1::text, 6::bigint)", q).boolean(0, 0));
  EXPECT_EQ(scalar("SELECT pgmq.purge_queue($1::text)", q), 5);
  EXPECT_EQ(count_rows("q_" + q), 0);
  EXPECT_EQ(count_rows("a_" + q), 1);
  EXPECT_EQ(send(q), 7);
  EXPECT_EQ(scalar("SELECT pgmq.purge_queue($1::text)", q), 1);
  EXPECT_EQ(scalar("SELECT pgmq.purge_queue($1::text)", q), 0);
}

// Upstream's base.sql: drop_queue return values
TEST_F(PgmqDrop, ReturnValuesAndNotice) {
  auto q = new_queue();
  send(q);
  conn.query("SELECT pgmq.archive($1::text, 1::bigint)", q);
  EXPECT_TRUE(conn.query("SELECT pgmq.drop_queue($1::text)", q).boolean(0, 0));
  EXPECT_EQ(objects_named_like(q), 0);
  EXPECT_EQ(scalar("SELECT count(*) FROM pg_class WHERE strpos(relname, $1::text) > 0", q), 0);
  conn.take_notices();
  auto missing = test::unique_name("pgone");
  EXPECT_FALSE(conn.query("SELECT pgmq.drop_queue($1::text)", missing).boolean(0, 0));
  EXPECT_EQ(conn.take_notices(), std::vector<std::string>{"pgmq queue `" + missing + "` does not exist"});
}

// Upstream's base.sql: dropping partitioned queues; dropping the rest
TEST_F(PgmqDrop, DeprecatedTwoArgumentFormWarnsAndReturnsTrue) {
  std::vector<std::string> names{new_queue(), new_queue(), new_queue()};
  conn.take_notices();
  auto r = conn.query(
    "SELECT pgmq.drop_queue(queue_name, true) FROM pgmq.list_queues() WHERE queue_name = ANY($1::text[])",
    db::array_literal(names));
  EXPECT_EQ(r.rows(), 3);
  for (int i = 0; i < r.rows(); ++i)
    EXPECT_TRUE(r.boolean(i, 0));
  const std::string warning =
    "drop_queue(queue_name, partitioned) is deprecated and will be removed in PGMQ v2.0. "
    "Use drop_queue(queue_name) instead";
  EXPECT_EQ(conn.take_notices(), (std::vector<std::string>{warning, warning, warning}));
  EXPECT_EQ(scalar("SELECT count(*) FROM pgmq.list_queues() WHERE queue_name = ANY($1::text[])", db::array_literal(names)), 0);
  for (auto& n : names)
    EXPECT_EQ(objects_named_like(n), 0);
  // Even for a missing queue it returns true (after the inner NOTICE).
  auto missing = test::unique_name("pgone");
  EXPECT_TRUE(conn.query("SELECT pgmq.drop_queue($1::text, false)", missing).boolean(0, 0));
  EXPECT_EQ(conn.take_notices(), (std::vector<std::string>{warning, "pgmq queue `" + missing + "` does not exist"}));
}

// Upstream's base.sql: dropping partitioned queues, second half:
// drop_queue(name) reads the partitioned flag from meta.
// No partitioned queue can exist without pg_partman, so flag a plain one.
TEST_F(PgmqDrop, QueueFlaggedPartitionedInMetaIsDropped) {
  auto q = new_queue();
  conn.query("UPDATE pgmq.meta SET is_partitioned = true WHERE queue_name = $1::text", q);
  EXPECT_TRUE(conn.query("SELECT pgmq.drop_queue($1::text)", q).boolean(0, 0));
  EXPECT_EQ(objects_named_like(q), 0);
}

TEST_F(PgmqDrop, DropsOnlyTheExactMetaRow) {
  auto base = test::unique_name("pdm");
  auto upper = track(base + "_X");
  auto lower = track(base + "_x");
  conn.query("SELECT pgmq.create($1::text)", upper);
  conn.query("SELECT pgmq.create($1::text)", lower);
  EXPECT_TRUE(conn.query("SELECT pgmq.drop_queue($1::text)", upper).boolean(0, 0));
  EXPECT_EQ(scalar("SELECT count(*) FROM pgmq.meta WHERE queue_name = $1::text", lower), 1);
  EXPECT_EQ(scalar("SELECT count(*) FROM pgmq.meta WHERE queue_name = $1::text", upper), 0);
  EXPECT_EQ(scalar("SELECT count(*) FROM pg_tables WHERE tablename = $1::text", "q_" + lower), 0);
}

// -- introspection -----------------------------------------------------------------

// Upstream's base.sql: metrics
TEST_F(PgmqMetrics, CountsAndAges) {
  auto q = new_queue();
  EXPECT_EQ(ints(conn.query("SELECT * FROM pgmq.send_batch($1::text, ARRAY['1', '2', '3', '4', '5']::jsonb[])", q)), range(1, 5));
  EXPECT_EQ(ints(conn.query("SELECT * FROM pgmq.send_batch($1::text, ARRAY['6', '7']::jsonb[], 10)", q)), range(6, 7));
  EXPECT_TRUE(conn.query("SELECT pgmq.archive($1::text, 1::bigint)", q).boolean(0, 0));
  auto m = conn.query("SELECT * FROM pgmq.metrics($1::text)", q);
  ASSERT_EQ(m.rows(), 1);
  ASSERT_EQ(m.columns(), 7);
  const std::vector<std::string> names{"queue_name", "queue_length", "newest_msg_age_sec", "oldest_msg_age_sec",
                                       "total_messages", "scrape_time", "queue_visible_length"};
  for (int c = 0; c < 7; ++c)
    EXPECT_EQ(m.column_name(c), names[c]);
  EXPECT_EQ(m.text(0, 0), q);
  EXPECT_EQ(m.int64(0, 1), 6);
  EXPECT_EQ(m.int64(0, 2), 0);
  EXPECT_EQ(m.int64(0, 3), 0);
  EXPECT_EQ(m.int64(0, 4), 7);
  EXPECT_EQ(m.int64(0, 6), 4);
  {
    db::transaction tx{conn};
    EXPECT_TRUE(conn.query("SELECT scrape_time = now() FROM pgmq.metrics($1::text)", q).boolean(0, 0));
  }
}

TEST_F(PgmqMetrics, EmptyQueue) {
  auto q = new_queue();
  auto m = conn.query("SELECT * FROM pgmq.metrics($1::text)", q);
  EXPECT_EQ(m.int64(0, 1), 0);
  EXPECT_TRUE(m.is_null(0, 2));
  EXPECT_TRUE(m.is_null(0, 3));
  EXPECT_EQ(m.int64(0, 4), 0);
  EXPECT_EQ(m.int64(0, 6), 0);
  // Ages are whole seconds from enqueued_at.
  send(q);
  conn.exec("UPDATE pgmq.q_" + q + " SET enqueued_at = now() - interval '90.6 s'");
  m = conn.query("SELECT newest_msg_age_sec, oldest_msg_age_sec FROM pgmq.metrics($1::text)", q);
  EXPECT_EQ(m.int64(0, 0), 91);
  EXPECT_EQ(m.int64(0, 1), 91);
}

// Upstream's base.sql, metrics_all; dropping the rest: on a fresh install, so
// that the set of queues is known.
TEST(PgmqFreshInstall, MetricsAllThenDropEverythingWithTheDeprecatedForm) {
  test::scratch_database scratch;
  auto conn = db::connection::open(scratch.dsn());
  db::migrate(conn, sql::pgmq_files(), sql::commandbus_files());
  ASSERT_EQ(conn.exec("SELECT count(*) FROM pgmq.list_queues()").int64(0, 0), 0);
  const std::vector<std::string> names{"test_a", "test-b", "TestC"};
  for (auto& n : names)
    conn.query("SELECT pgmq.create($1::text)", n);
  conn.query("SELECT pgmq.create_unlogged($1::text)", std::string{"test_unlogged"});
  conn.query("SELECT * FROM pgmq.send_batch($1::text, ARRAY['1', '2']::jsonb[])", names[1]);
  auto all = conn.exec("SELECT queue_name, queue_length FROM pgmq.metrics_all()");
  ASSERT_EQ(all.rows(), 4);
  const std::vector<std::string> in_meta_order{"test_a", "test-b", "TestC", "test_unlogged"};
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(all.text(i, 0), in_meta_order[i]);
    EXPECT_EQ(all.int64(i, 1), i == 1 ? 2 : 0);
  }
  conn.take_notices();
  auto dropped = conn.exec("SELECT pgmq.drop_queue(queue_name, true) FROM pgmq.list_queues()");
  ASSERT_EQ(dropped.rows(), 4);
  for (int i = 0; i < 4; ++i)
    EXPECT_TRUE(dropped.boolean(i, 0));
  auto notices = conn.take_notices();
  EXPECT_EQ(notices.size(), 4u);
  for (auto& n : notices)
    EXPECT_EQ(n, "drop_queue(queue_name, partitioned) is deprecated and will be removed in PGMQ v2.0. "
                 "Use drop_queue(queue_name) instead");
  EXPECT_EQ(conn.exec("SELECT count(*) FROM pgmq.list_queues()").int64(0, 0), 0);
  EXPECT_EQ(conn.exec("SELECT count(*) FROM pg_tables WHERE schemaname = 'pgmq'").int64(0, 0), 1); // meta
  EXPECT_EQ(conn.exec("SELECT count(*) FROM pgmq.metrics_all()").int64(0, 0), 0);
}

TEST_F(PgmqMetrics, ListQueuesColumns) {
  auto q = new_queue();
  auto u = track(test::unique_name("plu"));
  conn.query("SELECT pgmq.create_unlogged($1::text)", u);
  auto r = conn.query("SELECT * FROM pgmq.list_queues() WHERE queue_name IN ($1::text, $2::text) ORDER BY is_unlogged", q, u);
  ASSERT_EQ(r.columns(), 4);
  EXPECT_EQ(r.column_name(0), "queue_name");
  EXPECT_EQ(r.column_name(1), "is_partitioned");
  EXPECT_EQ(r.column_name(2), "is_unlogged");
  EXPECT_EQ(r.column_name(3), "created_at");
  ASSERT_EQ(r.rows(), 2);
  EXPECT_EQ(r.text(0, 0), q);
  EXPECT_FALSE(r.boolean(0, 1));
  EXPECT_FALSE(r.boolean(0, 2));
  EXPECT_EQ(r.text(1, 0), u);
  EXPECT_TRUE(r.boolean(1, 2));
}

// -- transactions and concurrency (transaction_tests.spec) --------------------------

// (a)
TEST_F(PgmqIsolation, UncommittedSendIsInvisible) {
  auto q = new_queue();
  auto other = test::connect();
  int64_t id = 0;
  {
    db::transaction tx{conn};
    id = send(q, "{\"a\": 1}");
    EXPECT_EQ(other.query("SELECT * FROM pgmq.read($1::text, 10, 1)", q).rows(), 0);
    tx.commit();
  }
  EXPECT_EQ(ints(other.query("SELECT msg_id FROM pgmq.read($1::text, 10, 1)", q)), std::vector<int64_t>{id});
  EXPECT_TRUE(other.query("SELECT pgmq.delete($1::text, $2::bigint)", q, id).boolean(0, 0));
}

// (b)
TEST_F(PgmqIsolation, ReadInOpenTransactionIsSkippedUntilRollback) {
  auto q = new_queue();
  auto id = send(q);
  auto other = test::connect();
  {
    db::transaction tx{conn};
    EXPECT_EQ(read_ids(q, 30, 1), std::vector<int64_t>{id});
    // SKIP LOCKED: no waiting, no row.
    EXPECT_EQ(other.query("SELECT * FROM pgmq.read($1::text, 30, 1)", q).rows(), 0);
    EXPECT_EQ(other.query("SELECT * FROM pgmq.pop($1::text)", q).rows(), 0);
  } // rollback undoes vt and read_ct
  auto r = other.query("SELECT msg_id, read_ct FROM pgmq.read($1::text, 30, 1)", q);
  ASSERT_EQ(r.rows(), 1);
  EXPECT_EQ(r.int64(0, 0), id);
  EXPECT_EQ(r.int64(0, 1), 1);
}

TEST_F(PgmqIsolation, LockedRowsAreSkippedNotWaitedFor) {
  auto q = new_queue();
  conn.query("SELECT * FROM pgmq.send_batch($1::text, (SELECT array_agg(to_jsonb(g)) FROM generate_series(1, 10) g))", q);
  auto other = test::connect();
  other.set_statement_timeout(std::chrono::milliseconds(5000));
  db::transaction tx{conn};
  EXPECT_EQ(read_ids(q, 0, 4), range(1, 4)); // vt 0: visible again, but locked
  EXPECT_EQ(ints(other.query("SELECT msg_id FROM pgmq.read($1::text, 30, 100)", q)), range(5, 10));
}

TEST_F(PgmqConcurrency, ParallelReadersNeverShareAMessage) {
  auto q = new_queue();
  constexpr int total = 3000;
  EXPECT_EQ(ints(conn.query("SELECT * FROM pgmq.send_batch($1::text, (SELECT array_agg(to_jsonb(g)) FROM generate_series(1, $2::integer) g))",
                            q, total)),
            range(1, total));
  constexpr int readers = 4;
  std::vector<std::vector<int64_t>> got(readers);
  std::vector<std::string> failures(readers);
  std::vector<std::thread> threads;
  for (int t = 0; t < readers; ++t) {
    threads.emplace_back([&, t] {
      try {
        auto c = test::connect();
        for (;;) {
          db::transaction tx{c};
          // Two reads per transaction, so open transactions overlap.
          auto a = c.query("SELECT msg_id FROM pgmq.read($1::text, 300, 7)", q);
          auto b = c.query("SELECT msg_id FROM pgmq.read($1::text, 300, 5)", q);
          for (auto* r : {&a, &b})
            for (int i = 0; i < r->rows(); ++i)
              got[t].push_back(r->int64(i, 0));
          tx.commit();
          if (a.rows() == 0 && b.rows() == 0)
            break;
        }
      } catch (const std::exception& e) {
        failures[t] = e.what();
      }
    });
  }
  for (auto& th : threads)
    th.join();
  std::vector<int64_t> all;
  for (int t = 0; t < readers; ++t) {
    EXPECT_EQ(failures[t], "") << "reader " << t;
    all.insert(all.end(), got[t].begin(), got[t].end());
  }
  std::sort(all.begin(), all.end());
  EXPECT_EQ(std::adjacent_find(all.begin(), all.end()), all.end()) << "a message was delivered twice";
  EXPECT_EQ(all, range(1, total));
  EXPECT_EQ(scalar("SELECT count(*) FROM pgmq.q_" + q + " WHERE read_ct <> 1"), 0);
}

TEST_F(PgmqConcurrency, ParallelPopsNeverShareAMessage) {
  auto q = new_queue();
  constexpr int total = 400;
  conn.query("SELECT * FROM pgmq.send_batch($1::text, (SELECT array_agg(to_jsonb(g)) FROM generate_series(1, $2::integer) g))", q, total);
  std::vector<std::vector<int64_t>> got(2);
  std::vector<std::thread> threads;
  for (int t = 0; t < 2; ++t) {
    threads.emplace_back([&, t] {
      try {
        auto c = test::connect();
        for (;;) {
          auto r = c.query("SELECT msg_id FROM pgmq.pop($1::text)", q);
          if (r.rows() == 0)
            break;
          got[t].push_back(r.int64(0, 0));
        }
      } catch (const std::exception&) {
        got[t].push_back(-1);
      }
    });
  }
  for (auto& th : threads)
    th.join();
  std::vector<int64_t> all = got[0];
  all.insert(all.end(), got[1].begin(), got[1].end());
  std::sort(all.begin(), all.end());
  EXPECT_EQ(all, range(1, total));
}

TEST_F(PgmqConcurrency, ConcurrentCreatesOfOneQueueSucceed) {
  auto q = track(test::unique_name("pcc"));
  std::vector<std::string> failures(4);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      try {
        auto c = test::connect();
        c.query("SELECT pgmq.create($1::text)", q);
      } catch (const std::exception& e) {
        failures[t] = e.what();
      }
    });
  }
  for (auto& th : threads)
    th.join();
  for (auto& f : failures)
    EXPECT_EQ(f, "");
  EXPECT_EQ(objects_named_like(q), 3);
}
