-- cmdbus: PGMQ 1.5 compatible SQL-only install (clean-room implementation).
--
-- Written from PGMQ's documented API (function signatures, return shapes,
-- error texts, behaviour), not from upstream code. Provides schema `pgmq`
-- with the same objects, function names, parameter names, overload sets,
-- return shapes, table layouts, index names and error texts as the PGMQ 1.5
-- extension (HEAD behaviour: 47-char
-- name limit, drop_queue of a missing queue gives a NOTICE and returns false,
-- advisory lock in create_* and drop_queue).
--
-- Run exactly once, as one multi-statement string inside a transaction, when
-- `CREATE EXTENSION pgmq` is not available. Everything is schema-qualified;
-- the script does not depend on search_path. Partitioned queues need
-- pg_partman and are not supported by this install.
--
-- Queue tables are reached with dynamic SQL: identifiers are quoted with
-- format('%I') after the queue-name character check in
-- pgmq.format_table_name, and values are always passed with USING.

CREATE SCHEMA IF NOT EXISTS pgmq;

-- One row per queue (no primary key; queue_name is unique and kept as passed).
CREATE TABLE pgmq.meta (
  queue_name     varchar     NOT NULL UNIQUE,
  is_partitioned boolean     NOT NULL,
  is_unlogged    boolean     NOT NULL,
  created_at     timestamptz NOT NULL DEFAULT now()
);

-- Read access for monitoring, as in PGMQ.
GRANT USAGE ON SCHEMA pgmq TO pg_monitor;
GRANT SELECT ON ALL TABLES IN SCHEMA pgmq TO pg_monitor;
GRANT SELECT ON ALL SEQUENCES IN SCHEMA pgmq TO pg_monitor;
ALTER DEFAULT PRIVILEGES IN SCHEMA pgmq GRANT SELECT ON TABLES TO pg_monitor;
ALTER DEFAULT PRIVILEGES IN SCHEMA pgmq GRANT SELECT ON SEQUENCES TO pg_monitor;

-- ---------------------------------------------------------------------------
-- Composite types
-- ---------------------------------------------------------------------------

CREATE TYPE pgmq.message_record AS (
  msg_id      bigint,
  read_ct     integer,
  enqueued_at timestamptz,
  vt          timestamptz,
  message     jsonb,
  headers     jsonb
);

CREATE TYPE pgmq.queue_record AS (
  queue_name     varchar,
  is_partitioned boolean,
  is_unlogged    boolean,
  created_at     timestamptz
);

CREATE TYPE pgmq.metrics_result AS (
  queue_name           text,
  queue_length         bigint,
  newest_msg_age_sec   integer,
  oldest_msg_age_sec   integer,
  total_messages       bigint,
  scrape_time          timestamptz,
  queue_visible_length bigint
);

-- ---------------------------------------------------------------------------
-- Helpers
-- ---------------------------------------------------------------------------

-- Whether an extension is installed in this database.
CREATE FUNCTION pgmq._extension_exists(extension_name text)
RETURNS boolean
LANGUAGE sql
AS $fn$
  SELECT EXISTS (
    SELECT 1 FROM pg_catalog.pg_extension e
    WHERE e.extname = $1
  );
$fn$;

-- Whether the relation named `table_name` (any schema) is a member of the
-- pgmq extension. Errors if several schemas hold a relation of that name.
CREATE FUNCTION pgmq._belongs_to_pgmq(table_name text)
RETURNS boolean
LANGUAGE sql
AS $fn$
  SELECT EXISTS (
    SELECT 1 FROM pg_catalog.pg_depend d
    WHERE d.classid = 'pg_catalog.pg_class'::pg_catalog.regclass
      AND d.objid = (SELECT c.oid FROM pg_catalog.pg_class c WHERE c.relname = $1)
      AND d.refclassid = 'pg_catalog.pg_extension'::pg_catalog.regclass
      AND d.refobjid = (SELECT e.oid FROM pg_catalog.pg_extension e WHERE e.extname = 'pgmq')
      AND d.deptype = 'e'
  );
$fn$;

-- Name of the table of a queue: lower(prefix || '_' || queue_name), after
-- rejecting names with characters that are never allowed.
CREATE FUNCTION pgmq.format_table_name(queue_name text, prefix text)
RETURNS text
LANGUAGE plpgsql
AS $fn$
BEGIN
  IF pg_catalog.strpos(queue_name, '$') > 0
     OR pg_catalog.strpos(queue_name, ';') > 0
     OR pg_catalog.strpos(queue_name, '--') > 0
     OR pg_catalog.strpos(queue_name, '''') > 0 THEN
    RAISE EXCEPTION $msg$queue name contains invalid characters: $, ;, --, or \'$msg$;
  END IF;
  RETURN pg_catalog.lower(prefix || '_' || queue_name);
END;
$fn$;

-- Length check used by the create functions.
CREATE FUNCTION pgmq.validate_queue_name(queue_name text)
RETURNS void
LANGUAGE plpgsql
AS $fn$
BEGIN
  IF pg_catalog.length(queue_name) > 47 THEN
    RAISE EXCEPTION 'queue name is too long, maximum length is 47 characters';
  END IF;
END;
$fn$;

-- Serialises create/drop of one queue (transaction-scoped advisory lock on
-- the raw name).
CREATE FUNCTION pgmq.acquire_queue_lock(queue_name text)
RETURNS void
LANGUAGE plpgsql
AS $fn$
BEGIN
  PERFORM pg_catalog.pg_advisory_xact_lock(pg_catalog.hashtext('pgmq.queue_' || queue_name));
END;
$fn$;

CREATE FUNCTION pgmq._ensure_pg_partman_installed()
RETURNS void
LANGUAGE plpgsql
AS $fn$
BEGIN
  IF NOT pgmq._extension_exists('pg_partman') THEN
    RAISE EXCEPTION 'pg_partman is required for partitioned queues';
  END IF;
END;
$fn$;

-- 'msg_id' when the interval is a number, otherwise 'enqueued_at'.
CREATE FUNCTION pgmq._get_partition_col(partition_interval text)
RETURNS text
LANGUAGE plpgsql
AS $fn$
DECLARE
  n integer;
BEGIN
  BEGIN
    n := partition_interval::integer;
  EXCEPTION WHEN OTHERS THEN
    RETURN 'enqueued_at';
  END;
  RETURN 'msg_id';
END;
$fn$;

-- Schema of the pg_partman extension, NULL when it is not installed.
CREATE FUNCTION pgmq._get_pg_partman_schema()
RETURNS text
LANGUAGE plpgsql
AS $fn$
DECLARE
  s text;
BEGIN
  SELECT n.nspname INTO s
  FROM pg_catalog.pg_extension e
  JOIN pg_catalog.pg_namespace n ON n.oid = e.extnamespace
  WHERE e.extname = 'pg_partman';
  RETURN s;
END;
$fn$;

-- Major version of pg_partman, NULL when it is not installed.
CREATE FUNCTION pgmq._get_pg_partman_major_version()
RETURNS integer
LANGUAGE plpgsql
AS $fn$
DECLARE
  v integer;
BEGIN
  SELECT pg_catalog.split_part(e.extversion, '.', 1)::integer INTO v
  FROM pg_catalog.pg_extension e
  WHERE e.extname = 'pg_partman';
  RETURN v;
END;
$fn$;

-- ---------------------------------------------------------------------------
-- Queue management
-- ---------------------------------------------------------------------------

-- Creates a queue: tables q_<n> and a_<n>, their indexes and the meta row.
-- Idempotent: an existing queue is left as it is.
CREATE FUNCTION pgmq.create_non_partitioned(queue_name text)
RETURNS void
LANGUAGE plpgsql
AS $fn$
DECLARE
  qtable text := pgmq.format_table_name(queue_name, 'q');
  atable text := pgmq.format_table_name(queue_name, 'a');
BEGIN
  PERFORM pgmq.validate_queue_name(queue_name);
  PERFORM pgmq.acquire_queue_lock(queue_name);

  EXECUTE pg_catalog.format(
    'CREATE TABLE IF NOT EXISTS pgmq.%I (
       msg_id      bigint PRIMARY KEY GENERATED ALWAYS AS IDENTITY,
       read_ct     integer NOT NULL DEFAULT 0,
       enqueued_at timestamptz NOT NULL DEFAULT now(),
       vt          timestamptz NOT NULL,
       message     jsonb,
       headers     jsonb
     )',
    qtable);

  EXECUTE pg_catalog.format(
    'CREATE TABLE IF NOT EXISTS pgmq.%I (
       msg_id      bigint PRIMARY KEY,
       read_ct     integer NOT NULL DEFAULT 0,
       enqueued_at timestamptz NOT NULL DEFAULT now(),
       archived_at timestamptz NOT NULL DEFAULT now(),
       vt          timestamptz NOT NULL,
       message     jsonb,
       headers     jsonb
     )',
    atable);

  -- Only when this script runs as the body of an extension named pgmq.
  IF pgmq._extension_exists('pgmq') THEN
    IF NOT pgmq._belongs_to_pgmq(qtable) THEN
      EXECUTE pg_catalog.format('ALTER EXTENSION pgmq ADD TABLE pgmq.%I', qtable);
      EXECUTE pg_catalog.format('ALTER EXTENSION pgmq ADD SEQUENCE pgmq.%I', qtable || '_msg_id_seq');
    END IF;
    IF NOT pgmq._belongs_to_pgmq(atable) THEN
      EXECUTE pg_catalog.format('ALTER EXTENSION pgmq ADD TABLE pgmq.%I', atable);
    END IF;
  END IF;

  EXECUTE pg_catalog.format('CREATE INDEX IF NOT EXISTS %I ON pgmq.%I (vt ASC)',
                            qtable || '_vt_idx', qtable);
  EXECUTE pg_catalog.format('CREATE INDEX IF NOT EXISTS %I ON pgmq.%I (archived_at)',
                            'archived_at_idx_' || queue_name, atable);

  INSERT INTO pgmq.meta (queue_name, is_partitioned, is_unlogged)
  VALUES (create_non_partitioned.queue_name, false, false)
  ON CONFLICT DO NOTHING;
END;
$fn$;

-- Same, with an UNLOGGED queue table (the archive stays logged).
CREATE FUNCTION pgmq.create_unlogged(queue_name text)
RETURNS void
LANGUAGE plpgsql
AS $fn$
DECLARE
  qtable text := pgmq.format_table_name(queue_name, 'q');
  atable text := pgmq.format_table_name(queue_name, 'a');
BEGIN
  PERFORM pgmq.validate_queue_name(queue_name);
  PERFORM pgmq.acquire_queue_lock(queue_name);

  EXECUTE pg_catalog.format(
    'CREATE UNLOGGED TABLE IF NOT EXISTS pgmq.%I (
       msg_id      bigint PRIMARY KEY GENERATED ALWAYS AS IDENTITY,
       read_ct     integer NOT NULL DEFAULT 0,
       enqueued_at timestamptz NOT NULL DEFAULT now(),
       vt          timestamptz NOT NULL,
       message     jsonb,
       headers     jsonb
     )',
    qtable);

  EXECUTE pg_catalog.format(
    'CREATE TABLE IF NOT EXISTS pgmq.%I (
       msg_id      bigint PRIMARY KEY,
       read_ct     integer NOT NULL DEFAULT 0,
       enqueued_at timestamptz NOT NULL DEFAULT now(),
       archived_at timestamptz NOT NULL DEFAULT now(),
       vt          timestamptz NOT NULL,
       message     jsonb,
       headers     jsonb
     )',
    atable);

  -- Only when this script runs as the body of an extension named pgmq.
  IF pgmq._extension_exists('pgmq') THEN
    IF NOT pgmq._belongs_to_pgmq(qtable) THEN
      EXECUTE pg_catalog.format('ALTER EXTENSION pgmq ADD TABLE pgmq.%I', qtable);
      EXECUTE pg_catalog.format('ALTER EXTENSION pgmq ADD SEQUENCE pgmq.%I', qtable || '_msg_id_seq');
    END IF;
    IF NOT pgmq._belongs_to_pgmq(atable) THEN
      EXECUTE pg_catalog.format('ALTER EXTENSION pgmq ADD TABLE pgmq.%I', atable);
    END IF;
  END IF;

  EXECUTE pg_catalog.format('CREATE INDEX IF NOT EXISTS %I ON pgmq.%I (vt ASC)',
                            qtable || '_vt_idx', qtable);
  EXECUTE pg_catalog.format('CREATE INDEX IF NOT EXISTS %I ON pgmq.%I (archived_at)',
                            'archived_at_idx_' || queue_name, atable);

  INSERT INTO pgmq.meta (queue_name, is_partitioned, is_unlogged)
  VALUES (create_unlogged.queue_name, false, true)
  ON CONFLICT DO NOTHING;
END;
$fn$;

CREATE FUNCTION pgmq."create"(queue_name text)
RETURNS void
LANGUAGE plpgsql
AS $fn$
BEGIN
  PERFORM pgmq.create_non_partitioned(queue_name);
END;
$fn$;

-- Partitioned queues need pg_partman, which this install does not support.
CREATE FUNCTION pgmq.create_partitioned(
  queue_name text,
  partition_interval text DEFAULT '10000',
  retention_interval text DEFAULT '100000'
)
RETURNS void
LANGUAGE plpgsql
AS $fn$
DECLARE
  qtable text := pgmq.format_table_name(queue_name, 'q');
BEGIN
  PERFORM pgmq.validate_queue_name(queue_name);
  PERFORM pgmq.acquire_queue_lock(queue_name);
  PERFORM pgmq._ensure_pg_partman_installed();
  RAISE EXCEPTION 'partitioned queues are not supported by the cmdbus PGMQ-compatible install'
    USING ERRCODE = 'feature_not_supported',
          HINT = 'Install the pgmq extension itself to use pg_partman partitioned queues.';
END;
$fn$;

-- `table_name` is a queue name; `leading_partition` is unused (as in PGMQ).
CREATE FUNCTION pgmq.convert_archive_partitioned(
  table_name text,
  partition_interval text DEFAULT '10000',
  retention_interval text DEFAULT '100000',
  leading_partition integer DEFAULT 10
)
RETURNS void
LANGUAGE plpgsql
AS $fn$
DECLARE
  atable text := pgmq.format_table_name(table_name, 'a');
BEGIN
  PERFORM pgmq.validate_queue_name(table_name);
  PERFORM pgmq.acquire_queue_lock(table_name);
  PERFORM pgmq._ensure_pg_partman_installed();

  IF EXISTS (SELECT 1 FROM pg_catalog.pg_class c
             JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
             WHERE n.nspname = 'pgmq' AND c.relname = atable AND c.relkind = 'p') THEN
    RAISE NOTICE 'Table %s is already partitioned', atable;
    RETURN;
  END IF;
  IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_class c
                 JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
                 WHERE n.nspname = 'pgmq' AND c.relname = atable AND c.relkind = 'r') THEN
    RAISE NOTICE 'Table %s does not exists', atable;
    RETURN;
  END IF;
  RAISE EXCEPTION 'partitioned archives are not supported by the cmdbus PGMQ-compatible install'
    USING ERRCODE = 'feature_not_supported',
          HINT = 'Install the pgmq extension itself to use pg_partman partitioned archives.';
END;
$fn$;

CREATE FUNCTION pgmq.drop_queue(queue_name text)
RETURNS boolean
LANGUAGE plpgsql
AS $fn$
DECLARE
  qtable text := pgmq.format_table_name(queue_name, 'q');
  atable text := pgmq.format_table_name(queue_name, 'a');
  partitioned boolean;
  partman_schema text;
BEGIN
  PERFORM pgmq.acquire_queue_lock(queue_name);

  SELECT m.is_partitioned INTO partitioned
  FROM pgmq.meta m
  WHERE m.queue_name = drop_queue.queue_name;

  IF NOT EXISTS (SELECT 1 FROM information_schema.tables t
                 WHERE t.table_schema = 'pgmq' AND t.table_name = qtable) THEN
    RAISE NOTICE 'pgmq queue `%` does not exist', queue_name;
    RETURN false;
  END IF;

  -- Only when this script runs as the body of an extension named pgmq.
  IF pgmq._extension_exists('pgmq') THEN
    IF pgmq._belongs_to_pgmq(qtable) THEN
      EXECUTE pg_catalog.format('ALTER EXTENSION pgmq DROP TABLE pgmq.%I', qtable);
    END IF;
    IF pgmq._belongs_to_pgmq(qtable || '_msg_id_seq') THEN
      EXECUTE pg_catalog.format('ALTER EXTENSION pgmq DROP SEQUENCE pgmq.%I', qtable || '_msg_id_seq');
    END IF;
    IF pgmq._belongs_to_pgmq(atable) THEN
      EXECUTE pg_catalog.format('ALTER EXTENSION pgmq DROP TABLE pgmq.%I', atable);
    END IF;
  END IF;

  EXECUTE pg_catalog.format('DROP TABLE IF EXISTS pgmq.%I', qtable);
  EXECUTE pg_catalog.format('DROP TABLE IF EXISTS pgmq.%I', atable);

  DELETE FROM pgmq.meta m WHERE m.queue_name = drop_queue.queue_name;

  IF partitioned THEN
    partman_schema := pgmq._get_pg_partman_schema();
    IF partman_schema IS NOT NULL THEN
      EXECUTE pg_catalog.format('DELETE FROM %I.part_config WHERE parent_table IN ($1, $2)',
                                partman_schema)
        USING 'pgmq.' || qtable, 'pgmq.' || atable;
    END IF;
  END IF;

  RETURN true;
END;
$fn$;

-- Deprecated form, kept for old clients: always returns true.
CREATE FUNCTION pgmq.drop_queue(queue_name text, partitioned boolean)
RETURNS boolean
LANGUAGE plpgsql
AS $fn$
BEGIN
  RAISE WARNING 'drop_queue(queue_name, partitioned) is deprecated and will be removed in PGMQ v2.0. Use drop_queue(queue_name) instead';
  PERFORM pgmq.drop_queue(queue_name);
  RETURN true;
END;
$fn$;

-- Removes every message of the queue (not the archive); returns how many.
-- The sequence is not reset.
CREATE FUNCTION pgmq.purge_queue(queue_name text)
RETURNS bigint
LANGUAGE plpgsql
AS $fn$
DECLARE
  qtable text := pgmq.format_table_name(queue_name, 'q');
  n bigint;
BEGIN
  EXECUTE pg_catalog.format('LOCK TABLE pgmq.%I IN ACCESS EXCLUSIVE MODE', qtable);
  EXECUTE pg_catalog.format('SELECT count(*) FROM pgmq.%I', qtable) INTO n;
  EXECUTE pg_catalog.format('TRUNCATE pgmq.%I', qtable);
  RETURN n;
END;
$fn$;

-- Extension mode: makes the archive table survive DROP EXTENSION pgmq.
-- In this SQL-only install the archive is never an extension member, so
-- this does nothing.
CREATE FUNCTION pgmq.detach_archive(queue_name text)
RETURNS void
LANGUAGE plpgsql
AS $fn$
DECLARE
  atable text := pgmq.format_table_name(queue_name, 'a');
BEGIN
  IF pgmq._extension_exists('pgmq') AND pgmq._belongs_to_pgmq(atable) THEN
    EXECUTE pg_catalog.format('ALTER EXTENSION pgmq DROP TABLE pgmq.%I', atable);
  END IF;
END;
$fn$;

-- ---------------------------------------------------------------------------
-- Sending (every call is one INSERT; no defaults, as in PGMQ)
-- ---------------------------------------------------------------------------

-- The base form: headers and an absolute visibility time.
CREATE FUNCTION pgmq.send(queue_name text, msg jsonb, headers jsonb, delay timestamptz)
RETURNS SETOF bigint
LANGUAGE plpgsql
AS $fn$
BEGIN
  RETURN QUERY EXECUTE pg_catalog.format(
    'INSERT INTO pgmq.%I (vt, message, headers) VALUES ($1, $2, $3) RETURNING msg_id',
    pgmq.format_table_name(queue_name, 'q'))
  USING delay, msg, headers;
END;
$fn$;

CREATE FUNCTION pgmq.send(queue_name text, msg jsonb, headers jsonb, delay integer)
RETURNS SETOF bigint
LANGUAGE plpgsql
AS $fn$
BEGIN
  RETURN QUERY EXECUTE pg_catalog.format(
    'INSERT INTO pgmq.%I (vt, message, headers) VALUES ($1, $2, $3) RETURNING msg_id',
    pgmq.format_table_name(queue_name, 'q'))
  USING pg_catalog.clock_timestamp() + pg_catalog.make_interval(secs => delay), msg, headers;
END;
$fn$;

CREATE FUNCTION pgmq.send(queue_name text, msg jsonb, delay timestamptz)
RETURNS SETOF bigint
LANGUAGE plpgsql
AS $fn$
BEGIN
  RETURN QUERY EXECUTE pg_catalog.format(
    'INSERT INTO pgmq.%I (vt, message) VALUES ($1, $2) RETURNING msg_id',
    pgmq.format_table_name(queue_name, 'q'))
  USING delay, msg;
END;
$fn$;

CREATE FUNCTION pgmq.send(queue_name text, msg jsonb, delay integer)
RETURNS SETOF bigint
LANGUAGE plpgsql
AS $fn$
BEGIN
  RETURN QUERY EXECUTE pg_catalog.format(
    'INSERT INTO pgmq.%I (vt, message) VALUES ($1, $2) RETURNING msg_id',
    pgmq.format_table_name(queue_name, 'q'))
  USING pg_catalog.clock_timestamp() + pg_catalog.make_interval(secs => delay), msg;
END;
$fn$;

CREATE FUNCTION pgmq.send(queue_name text, msg jsonb, headers jsonb)
RETURNS SETOF bigint
LANGUAGE plpgsql
AS $fn$
BEGIN
  RETURN QUERY EXECUTE pg_catalog.format(
    'INSERT INTO pgmq.%I (vt, message, headers) VALUES ($1, $2, $3) RETURNING msg_id',
    pgmq.format_table_name(queue_name, 'q'))
  USING pg_catalog.clock_timestamp(), msg, headers;
END;
$fn$;

CREATE FUNCTION pgmq.send(queue_name text, msg jsonb)
RETURNS SETOF bigint
LANGUAGE plpgsql
AS $fn$
BEGIN
  RETURN QUERY EXECUTE pg_catalog.format(
    'INSERT INTO pgmq.%I (vt, message) VALUES ($1, $2) RETURNING msg_id',
    pgmq.format_table_name(queue_name, 'q'))
  USING pg_catalog.clock_timestamp(), msg;
END;
$fn$;

-- The base batch form. msgs and headers are expanded side by side (a shorter
-- or NULL headers array leaves the remaining headers NULL; a longer one adds
-- rows with a NULL message, as in PGMQ). Ids come back in array order.
CREATE FUNCTION pgmq.send_batch(queue_name text, msgs jsonb[], headers jsonb[], delay timestamptz)
RETURNS SETOF bigint
LANGUAGE plpgsql
AS $fn$
BEGIN
  RETURN QUERY EXECUTE pg_catalog.format(
    'INSERT INTO pgmq.%I (vt, message, headers)
     SELECT $1, t.m, t.h FROM ROWS FROM (pg_catalog.unnest($2::jsonb[]), pg_catalog.unnest($3::jsonb[])) AS t(m, h)
     RETURNING msg_id',
    pgmq.format_table_name(queue_name, 'q'))
  USING delay, msgs, headers;
END;
$fn$;

CREATE FUNCTION pgmq.send_batch(queue_name text, msgs jsonb[], headers jsonb[], delay integer)
RETURNS SETOF bigint
LANGUAGE plpgsql
AS $fn$
BEGIN
  RETURN QUERY EXECUTE pg_catalog.format(
    'INSERT INTO pgmq.%I (vt, message, headers)
     SELECT $1, t.m, t.h FROM ROWS FROM (pg_catalog.unnest($2::jsonb[]), pg_catalog.unnest($3::jsonb[])) AS t(m, h)
     RETURNING msg_id',
    pgmq.format_table_name(queue_name, 'q'))
  USING pg_catalog.clock_timestamp() + pg_catalog.make_interval(secs => delay), msgs, headers;
END;
$fn$;

CREATE FUNCTION pgmq.send_batch(queue_name text, msgs jsonb[], delay timestamptz)
RETURNS SETOF bigint
LANGUAGE plpgsql
AS $fn$
BEGIN
  RETURN QUERY EXECUTE pg_catalog.format(
    'INSERT INTO pgmq.%I (vt, message)
     SELECT $1, t.m FROM pg_catalog.unnest($2::jsonb[]) AS t(m)
     RETURNING msg_id',
    pgmq.format_table_name(queue_name, 'q'))
  USING delay, msgs;
END;
$fn$;

CREATE FUNCTION pgmq.send_batch(queue_name text, msgs jsonb[], delay integer)
RETURNS SETOF bigint
LANGUAGE plpgsql
AS $fn$
BEGIN
  RETURN QUERY EXECUTE pg_catalog.format(
    'INSERT INTO pgmq.%I (vt, message)
     SELECT $1, t.m FROM pg_catalog.unnest($2::jsonb[]) AS t(m)
     RETURNING msg_id',
    pgmq.format_table_name(queue_name, 'q'))
  USING pg_catalog.clock_timestamp() + pg_catalog.make_interval(secs => delay), msgs;
END;
$fn$;

CREATE FUNCTION pgmq.send_batch(queue_name text, msgs jsonb[], headers jsonb[])
RETURNS SETOF bigint
LANGUAGE plpgsql
AS $fn$
BEGIN
  RETURN QUERY EXECUTE pg_catalog.format(
    'INSERT INTO pgmq.%I (vt, message, headers)
     SELECT $1, t.m, t.h FROM ROWS FROM (pg_catalog.unnest($2::jsonb[]), pg_catalog.unnest($3::jsonb[])) AS t(m, h)
     RETURNING msg_id',
    pgmq.format_table_name(queue_name, 'q'))
  USING pg_catalog.clock_timestamp(), msgs, headers;
END;
$fn$;

CREATE FUNCTION pgmq.send_batch(queue_name text, msgs jsonb[])
RETURNS SETOF bigint
LANGUAGE plpgsql
AS $fn$
BEGIN
  RETURN QUERY EXECUTE pg_catalog.format(
    'INSERT INTO pgmq.%I (vt, message)
     SELECT $1, t.m FROM pg_catalog.unnest($2::jsonb[]) AS t(m)
     RETURNING msg_id',
    pgmq.format_table_name(queue_name, 'q'))
  USING pg_catalog.clock_timestamp(), msgs;
END;
$fn$;

-- ---------------------------------------------------------------------------
-- Consuming
-- ---------------------------------------------------------------------------

-- read and read_with_poll run one statement per attempt: pick up to qty
-- visible rows in msg_id order (FOR UPDATE SKIP LOCKED), bump vt and read_ct,
-- return them in msg_id order. Parameters: $1 qty, $2 visibility interval,
-- $3 cut-off, $4 conditional. The cut-off is clock_timestamp() taken right
-- before the statement and passed as a parameter so that the planner may use
-- the vt index; the new vt uses clock_timestamp() per row.
CREATE FUNCTION pgmq.read(queue_name text, vt integer, qty integer, conditional jsonb DEFAULT '{}')
RETURNS SETOF pgmq.message_record
LANGUAGE plpgsql
AS $fn$
BEGIN
  RETURN QUERY EXECUTE pg_catalog.format(
    'WITH picked AS (
       SELECT q.msg_id FROM pgmq.%1$I q
       WHERE q.vt <= $3%2$s
       ORDER BY q.msg_id
       LIMIT $1
       FOR UPDATE SKIP LOCKED
     ), updated AS (
       UPDATE pgmq.%1$I m
       SET vt = pg_catalog.clock_timestamp() + $2, read_ct = m.read_ct + 1
       FROM picked
       WHERE m.msg_id = picked.msg_id
       RETURNING m.msg_id, m.read_ct, m.enqueued_at, m.vt, m.message, m.headers
     )
     SELECT u.msg_id, u.read_ct, u.enqueued_at, u.vt, u.message, u.headers
     FROM updated u ORDER BY u.msg_id',
    pgmq.format_table_name(queue_name, 'q'),
    CASE WHEN conditional IS NOT NULL AND conditional <> '{}'::jsonb
         THEN ' AND q.message @> $4' ELSE '' END)
  USING qty, pg_catalog.make_interval(secs => vt), pg_catalog.clock_timestamp(), conditional;
END;
$fn$;

CREATE FUNCTION pgmq.read_with_poll(
  queue_name text,
  vt integer,
  qty integer,
  max_poll_seconds integer DEFAULT 5,
  poll_interval_ms integer DEFAULT 100,
  conditional jsonb DEFAULT '{}'
)
RETURNS SETOF pgmq.message_record
LANGUAGE plpgsql
AS $fn$
DECLARE
  stmt text := pg_catalog.format(
    'WITH picked AS (
       SELECT q.msg_id FROM pgmq.%1$I q
       WHERE q.vt <= $3%2$s
       ORDER BY q.msg_id
       LIMIT $1
       FOR UPDATE SKIP LOCKED
     ), updated AS (
       UPDATE pgmq.%1$I m
       SET vt = pg_catalog.clock_timestamp() + $2, read_ct = m.read_ct + 1
       FROM picked
       WHERE m.msg_id = picked.msg_id
       RETURNING m.msg_id, m.read_ct, m.enqueued_at, m.vt, m.message, m.headers
     )
     SELECT u.msg_id, u.read_ct, u.enqueued_at, u.vt, u.message, u.headers
     FROM updated u ORDER BY u.msg_id',
    pgmq.format_table_name(queue_name, 'q'),
    CASE WHEN conditional IS NOT NULL AND conditional <> '{}'::jsonb
         THEN ' AND q.message @> $4' ELSE '' END);
  vt_interval interval := pg_catalog.make_interval(secs => vt);
  deadline timestamptz := pg_catalog.clock_timestamp()
                          + pg_catalog.make_interval(secs => max_poll_seconds);
BEGIN
  LOOP
    IF pg_catalog.clock_timestamp() >= deadline THEN
      RETURN;
    END IF;
    RETURN QUERY EXECUTE stmt
      USING qty, vt_interval, pg_catalog.clock_timestamp(), conditional;
    IF FOUND THEN
      RETURN;
    END IF;
    PERFORM pg_catalog.pg_sleep(poll_interval_ms::numeric / 1000);
  END LOOP;
END;
$fn$;

-- Deletes and returns the visible message with the lowest id, unchanged
-- (read_ct not incremented, old vt). Not archived.
CREATE FUNCTION pgmq.pop(queue_name text)
RETURNS SETOF pgmq.message_record
LANGUAGE plpgsql
AS $fn$
BEGIN
  RETURN QUERY EXECUTE pg_catalog.format(
    'WITH picked AS (
       SELECT q.msg_id FROM pgmq.%1$I q
       WHERE q.vt <= $1
       ORDER BY q.msg_id
       LIMIT 1
       FOR UPDATE SKIP LOCKED
     )
     DELETE FROM pgmq.%1$I m
     USING picked
     WHERE m.msg_id = picked.msg_id
     RETURNING m.msg_id, m.read_ct, m.enqueued_at, m.vt, m.message, m.headers',
    pgmq.format_table_name(queue_name, 'q'))
  USING pg_catalog.clock_timestamp();
END;
$fn$;

-- Sets vt = now + vt seconds on one message, visible or not; returns the
-- updated row (none if the id does not exist).
CREATE FUNCTION pgmq.set_vt(queue_name text, msg_id bigint, vt integer)
RETURNS SETOF pgmq.message_record
LANGUAGE plpgsql
AS $fn$
BEGIN
  RETURN QUERY EXECUTE pg_catalog.format(
    'UPDATE pgmq.%I m
     SET vt = pg_catalog.clock_timestamp() + $2
     WHERE m.msg_id = $1
     RETURNING m.msg_id, m.read_ct, m.enqueued_at, m.vt, m.message, m.headers',
    pgmq.format_table_name(queue_name, 'q'))
  USING msg_id, pg_catalog.make_interval(secs => vt);
END;
$fn$;

-- ---------------------------------------------------------------------------
-- Deleting and archiving
-- ---------------------------------------------------------------------------

CREATE FUNCTION pgmq.delete(queue_name text, msg_id bigint)
RETURNS boolean
LANGUAGE plpgsql
AS $fn$
DECLARE
  n bigint;
BEGIN
  EXECUTE pg_catalog.format('DELETE FROM pgmq.%I m WHERE m.msg_id = $1',
                            pgmq.format_table_name(queue_name, 'q'))
  USING msg_id;
  GET DIAGNOSTICS n = ROW_COUNT;
  RETURN n > 0;
END;
$fn$;

CREATE FUNCTION pgmq.delete(queue_name text, msg_ids bigint[])
RETURNS SETOF bigint
LANGUAGE plpgsql
AS $fn$
BEGIN
  RETURN QUERY EXECUTE pg_catalog.format(
    'DELETE FROM pgmq.%I m WHERE m.msg_id = ANY($1) RETURNING m.msg_id',
    pgmq.format_table_name(queue_name, 'q'))
  USING msg_ids;
END;
$fn$;

CREATE FUNCTION pgmq.archive(queue_name text, msg_id bigint)
RETURNS boolean
LANGUAGE plpgsql
AS $fn$
DECLARE
  n bigint;
BEGIN
  EXECUTE pg_catalog.format(
    'WITH moved AS (
       DELETE FROM pgmq.%I m WHERE m.msg_id = $1
       RETURNING m.msg_id, m.read_ct, m.enqueued_at, m.vt, m.message, m.headers
     )
     INSERT INTO pgmq.%I (msg_id, read_ct, enqueued_at, vt, message, headers)
     SELECT moved.msg_id, moved.read_ct, moved.enqueued_at, moved.vt, moved.message, moved.headers
     FROM moved',
    pgmq.format_table_name(queue_name, 'q'), pgmq.format_table_name(queue_name, 'a'))
  USING msg_id;
  GET DIAGNOSTICS n = ROW_COUNT;
  RETURN n > 0;
END;
$fn$;

CREATE FUNCTION pgmq.archive(queue_name text, msg_ids bigint[])
RETURNS SETOF bigint
LANGUAGE plpgsql
AS $fn$
BEGIN
  RETURN QUERY EXECUTE pg_catalog.format(
    'WITH moved AS (
       DELETE FROM pgmq.%I m WHERE m.msg_id = ANY($1)
       RETURNING m.msg_id, m.read_ct, m.enqueued_at, m.vt, m.message, m.headers
     )
     INSERT INTO pgmq.%I (msg_id, read_ct, enqueued_at, vt, message, headers)
     SELECT moved.msg_id, moved.read_ct, moved.enqueued_at, moved.vt, moved.message, moved.headers
     FROM moved
     RETURNING msg_id',
    pgmq.format_table_name(queue_name, 'q'), pgmq.format_table_name(queue_name, 'a'))
  USING msg_ids;
END;
$fn$;

-- ---------------------------------------------------------------------------
-- Introspection
-- ---------------------------------------------------------------------------

CREATE FUNCTION pgmq.list_queues()
RETURNS SETOF pgmq.queue_record
LANGUAGE plpgsql
AS $fn$
BEGIN
  RETURN QUERY
    SELECT m.queue_name, m.is_partitioned, m.is_unlogged, m.created_at
    FROM pgmq.meta m;
END;
$fn$;

-- Metrics of one queue, computed with now() (transaction start).
CREATE FUNCTION pgmq.metrics(queue_name text)
RETURNS pgmq.metrics_result
LANGUAGE plpgsql
AS $fn$
DECLARE
  qtable text := pgmq.format_table_name(queue_name, 'q');
  r pgmq.metrics_result;
BEGIN
  EXECUTE pg_catalog.format(
    'SELECT $1::text,
            s.queue_length,
            s.newest_msg_age_sec,
            s.oldest_msg_age_sec,
            t.total_messages,
            s.scrape_time,
            s.queue_visible_length
     FROM (
       SELECT count(*) AS queue_length,
              (EXTRACT(epoch FROM (now() - max(q.enqueued_at))))::integer AS newest_msg_age_sec,
              (EXTRACT(epoch FROM (now() - min(q.enqueued_at))))::integer AS oldest_msg_age_sec,
              now() AS scrape_time,
              count(*) FILTER (WHERE q.vt <= now()) AS queue_visible_length
       FROM pgmq.%I q
     ) s,
     (
       SELECT CASE WHEN sq.is_called THEN sq.last_value ELSE 0 END AS total_messages
       FROM pgmq.%I sq
     ) t',
    qtable, qtable || '_msg_id_seq')
  INTO r
  USING queue_name;
  RETURN r;
END;
$fn$;

CREATE FUNCTION pgmq.metrics_all()
RETURNS SETOF pgmq.metrics_result
LANGUAGE plpgsql
AS $fn$
DECLARE
  qname varchar;
BEGIN
  FOR qname IN SELECT m.queue_name FROM pgmq.meta m LOOP
    RETURN NEXT pgmq.metrics(qname);
  END LOOP;
END;
$fn$;
