// Tests of the PGMQ layer (sql/pgmq/V001__pgmq.sql, or the pgmq extension where
// it is installed) against PGMQ 1.5's documented behaviour, the scenarios of
// upstream's test/sql/base.sql and its isolation specs plus edge cases; this
// part: the catalog (functions, types, queue and archive tables). Every test
// uses its own queues (test::unique_name) and drops them at the end, so tests
// do not depend on each other or on the database's history. Only the scenarios
// that are about time wait, for 1-2 s at most. Shared fixtures:
// tests/db/pgmq_support.hpp.

#include <gtest/gtest.h>

#include "tests/db/pgmq_support.hpp"

using namespace cmdbus;
using db::errc;
using namespace cmdbus::pgmq_test;

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
