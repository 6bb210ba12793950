-- Partitioned queues (docs/operations.md, "Partitioned queues"): queues
-- whose table and archive are partitioned by pg_partman, so that old
-- archive partitions are dropped whole instead of deleted row by row.
-- Added beside the reference's objects and PGMQ's (nothing of them
-- changes; PGMQ's own pgmq.create_partitioned makes the tables).
--
--   cmdbus_partitioned_queue          the retention of each partitioned
--                                     queue, kept here and NOT in
--                                     pg_partman's part_config
--   cmdbus_create_partitioned_queue   pgmq.create_partitioned, then moves
--                                     the retention here
--   cmdbus_partition_maintenance      creates the partitions a queue needs
--                                     next and drops those past retention
--                                     that hold nothing still needed
--   cmdbus_partitioned_queues         the partitioned queues of a domain
--
-- Why the retention is not pg_partman's: pg_partman drops a partition past
-- retention whatever it holds. In a queue table that would drop messages
-- not yet processed (a command retried with backoff, one sent with a
-- delay); in an archive, the message of a command in the troubleshooting
-- queue, which an operator's retry re-sends from there. Maintenance here
-- drops a partition past retention only when it holds no such row; one
-- that does is kept (and counted) until it holds none. pg_partman's own
-- maintenance (its background worker, a cron job) stays harmless: with no
-- retention in part_config it only creates partitions.
--
-- A queue made by pgmq.create_partitioned directly has its retention in
-- part_config; its first cmdbus maintenance moves it here.

CREATE TABLE commandbus.cmdbus_partitioned_queue (
    queue_name TEXT PRIMARY KEY,
    -- A number of message ids or an interval of time, the same kind as
    -- the queue's partition interval; NULL keeps every partition.
    retention  TEXT,
    created_at TIMESTAMPTZ NOT NULL DEFAULT now()
);

-- The schema of the pg_partman extension; NULL when it is not installed in
-- this database.
CREATE FUNCTION commandbus.cmdbus_partman_schema()
RETURNS TEXT
LANGUAGE sql STABLE
AS $$
    SELECT n.nspname::TEXT
      FROM pg_catalog.pg_extension e
      JOIN pg_catalog.pg_namespace n ON n.oid = e.extnamespace
     WHERE e.extname = 'pg_partman'
$$;

-- Returns pg_partman's schema; raises 55000 with what to run when the
-- extension is not installed (p_caller names the function in the message).
CREATE FUNCTION commandbus.cmdbus_require_partman(p_caller TEXT)
RETURNS TEXT
LANGUAGE plpgsql STABLE
AS $fn$
DECLARE
    v_schema TEXT := commandbus.cmdbus_partman_schema();
BEGIN
    IF v_schema IS NULL THEN
        RAISE EXCEPTION '%: partitioned queues need the pg_partman extension, which is not installed in database %',
            p_caller, current_database()
            USING ERRCODE = '55000',
                  HINT = 'Install pg_partman on the server (Debian: postgresql-15-partman), then as a superuser: CREATE SCHEMA partman; CREATE EXTENSION pg_partman SCHEMA partman;';
    END IF;
    RETURN v_schema;
END;
$fn$;

-- 'id' when p_value is a whole number of message ids (as PGMQ tells them:
-- it casts to integer), 'time' when it is an interval; both must be > 0.
-- Raises 22023 otherwise (p_what names the value in the message).
CREATE FUNCTION commandbus.cmdbus_partition_spec_kind(p_what TEXT, p_value TEXT)
RETURNS TEXT
LANGUAGE plpgsql IMMUTABLE
AS $fn$
DECLARE
    v_n INTEGER;
    v_i INTERVAL;
BEGIN
    IF p_value IS NULL THEN
        RAISE EXCEPTION 'the % must be given', p_what USING ERRCODE = '22023';
    END IF;
    BEGIN
        v_n := p_value::INTEGER;
    EXCEPTION WHEN OTHERS THEN
        v_n := NULL;
    END;
    IF v_n IS NOT NULL THEN
        IF v_n < 1 THEN
            RAISE EXCEPTION 'the % (%) must be at least 1', p_what, p_value
                USING ERRCODE = '22023';
        END IF;
        RETURN 'id';
    END IF;
    BEGIN
        v_i := p_value::INTERVAL;
    EXCEPTION WHEN OTHERS THEN
        RAISE EXCEPTION 'the % (%) is neither a number of messages nor an interval of time',
            p_what, quote_literal(p_value) USING ERRCODE = '22023';
    END;
    IF v_i <= INTERVAL '0' THEN
        RAISE EXCEPTION 'the % (%) must be longer than 0', p_what, p_value
            USING ERRCODE = '22023';
    END IF;
    RETURN 'time';
END;
$fn$;

-- Creates the partitioned queue p_queue_name (pgmq.create_partitioned with
-- p_interval and p_retention) and keeps its retention in
-- cmdbus_partitioned_queue instead of part_config; returns whether it
-- created it (FALSE: it is a partitioned queue already, left as it is).
-- Runs as its owner (the role that ran `cmdbus migrate`), like
-- cmdbus_create_queue. Checks everything before creating anything, and the
-- whole creation is one transaction: a failure leaves nothing behind.
-- Raises 22023 for an invalid name, interval or retention (or a retention
-- of another kind than the interval), 55000 without pg_partman or when a
-- queue of that name exists and is not partitioned.
CREATE FUNCTION commandbus.cmdbus_create_partitioned_queue(
    p_queue_name TEXT,
    p_interval   TEXT,
    p_retention  TEXT
) RETURNS BOOLEAN
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    v_kind     TEXT;
    v_partman  TEXT;
    v_existing BOOLEAN;
BEGIN
    IF p_queue_name IS NULL OR p_queue_name !~ '^[A-Za-z0-9_]{1,47}$' THEN
        RAISE EXCEPTION 'invalid queue name %', quote_literal(p_queue_name)
            USING ERRCODE = '22023',
                  HINT = 'A queue name has 1 to 47 letters, digits or underscores.';
    END IF;
    v_kind := commandbus.cmdbus_partition_spec_kind('partition interval', p_interval);
    IF p_retention IS NOT NULL
       AND commandbus.cmdbus_partition_spec_kind('retention', p_retention) <> v_kind THEN
        RAISE EXCEPTION 'the retention (%) and the partition interval (%) must both be numbers of messages or both intervals of time',
            p_retention, p_interval USING ERRCODE = '22023';
    END IF;
    v_partman := commandbus.cmdbus_require_partman('cmdbus_create_partitioned_queue');
    PERFORM pg_advisory_xact_lock(hashtext('pgmq.queue_' || p_queue_name));
    SELECT m.is_partitioned INTO v_existing
      FROM pgmq.meta m WHERE m.queue_name = p_queue_name;
    IF v_existing THEN
        RETURN FALSE;
    ELSIF v_existing IS NOT NULL THEN
        RAISE EXCEPTION 'queue % exists and is not partitioned', p_queue_name
            USING ERRCODE = '55000',
                  HINT = 'A queue cannot be converted; create the partitioned queue under another name, or drop this one first.';
    END IF;
    PERFORM pgmq.create_partitioned(p_queue_name, p_interval, p_retention);
    INSERT INTO commandbus.cmdbus_partitioned_queue AS p (queue_name, retention)
    VALUES (p_queue_name, p_retention)
    ON CONFLICT (queue_name)
    DO UPDATE SET retention = EXCLUDED.retention, created_at = now();
    EXECUTE format(
        'UPDATE %I.part_config c
            SET retention = NULL,
                infinite_time_partitions = (c.control <> ''msg_id'')
          WHERE c.parent_table IN ($1, $2)',
        v_partman)
      USING 'pgmq.' || pgmq.format_table_name(p_queue_name, 'q'),
            'pgmq.' || pgmq.format_table_name(p_queue_name, 'a');
    RETURN TRUE;
END;
$fn$;

REVOKE ALL ON FUNCTION commandbus.cmdbus_create_partitioned_queue(TEXT, TEXT, TEXT) FROM PUBLIC;

-- The partitioned queues a maintenance of p_domain covers: those named
-- "<p_domain>__..." (as cmdbus_prune_queues); NULL: every one.
CREATE FUNCTION commandbus.cmdbus_partitioned_queues(p_domain TEXT)
RETURNS SETOF TEXT
LANGUAGE sql STABLE
AS $$
    SELECT m.queue_name::TEXT
      FROM pgmq.meta m
     WHERE m.is_partitioned
       AND (p_domain IS NULL
            OR left(m.queue_name::TEXT, length(p_domain) + 2) = p_domain || '__')
     ORDER BY m.queue_name
$$;

-- Whether partition p_table (schema-qualified, quoted) of a queue's table
-- (p_archive FALSE) or archive (TRUE) holds a row that must stay: in a
-- queue table any row (a message not yet processed); in an archive the
-- message of a command that is still there and not final (the same rule as
-- the row-by-row prune of V013).
CREATE FUNCTION commandbus.cmdbus_partition_held(p_table TEXT, p_archive BOOLEAN)
RETURNS BOOLEAN
LANGUAGE plpgsql STABLE
AS $fn$
DECLARE
    v_held BOOLEAN;
BEGIN
    IF NOT p_archive THEN
        EXECUTE format('SELECT EXISTS (SELECT 1 FROM %s)', p_table) INTO v_held;
    ELSE
        EXECUTE format(
            'SELECT EXISTS (SELECT 1 FROM %s a WHERE EXISTS ('
            'SELECT 1 FROM commandbus.command c '
            'WHERE c.domain = a.message->>''domain'' '
            'AND c.command_id = CASE WHEN a.message->>''command_id'' ~* '
            '''^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$'' '
            'THEN (a.message->>''command_id'')::uuid END '
            'AND NOT commandbus.cmdbus_command_final(c.status)))',
            p_table) INTO v_held;
    END IF;
    RETURN v_held;
END;
$fn$;

-- One maintenance of the partitioned queue p_queue_name, for its table and
-- its archive, in the caller's transaction:
-- 1. the retention: taken from part_config (and removed there) the first
--    time for a queue that pgmq.create_partitioned made directly;
-- 2. what is to do, found without any lock beyond reads: rows in a default
--    partition (ids or times beyond the partitions that existed when they
--    were written); partitions ahead that are missing (by id: premake
--    partitions beyond the highest id the queue handed out, its sequence,
--    so an empty queue gets them too; by time: premake beyond now);
--    partitions entirely past retention (by id: below the highest id
--    handed out minus the retention; by time: older than now minus the
--    retention) that hold no row that must stay (cmdbus_partition_held;
--    those that do are counted as kept);
-- 3. only when something is to do: an ACCESS EXCLUSIVE lock of the table
--    and the archive (and so of their partitions), in PGMQ's order (queue,
--    then archive), waited for at most p_lock_timeout; under it the rows of
--    the default partitions are moved to partitions of their own
--    (pg_partman's partition_data_id / partition_data_time), the missing
--    partitions created (pg_partman's create_partition_id, or its
--    run_maintenance of the parent by time), and the candidates checked
--    again and dropped. Taking both parents first, before any DDL, keeps the
--    lock order of every reader and writer (parent, then partitions): no
--    deadlock with them. When the lock is not granted in time nothing
--    changes: the candidates count as kept, and the next run does the rest.
-- Returns the partitions created, dropped and kept. Raises 55000 without
-- pg_partman and 22023 for a queue that is not a partitioned PGMQ queue.
-- Runs as its owner (creating and dropping partitions is DDL).
CREATE FUNCTION commandbus.cmdbus_partition_maintenance(
    p_queue_name   TEXT,
    p_lock_timeout INTERVAL DEFAULT INTERVAL '1 second'
) RETURNS TABLE(created INT, dropped INT, kept INT)
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    v_partman   TEXT;
    v_qtable    TEXT;
    v_atable    TEXT;
    v_retention TEXT;
    v_high      BIGINT;
    v_cfg       RECORD;
    v_child     RECORD;
    v_parent    REGCLASS;
    v_default   REGCLASS;
    v_rows      BOOLEAN;
    v_exists    BOOLEAN;
    v_step      BIGINT;
    v_start     BIGINT;
    v_bounds    TEXT[];
    v_past      BOOLEAN;
    v_archive   BOOLEAN;
    -- What is to do, per parent (parallel arrays).
    v_parents   TEXT[] := '{}';
    v_controls  TEXT[] := '{}';
    v_moves     BOOLEAN[] := '{}';
    v_creates   BOOLEAN[] := '{}';
    v_starts    TEXT[] := '{}';
    -- Candidates to drop (parallel arrays).
    v_tables    TEXT[] := '{}';
    v_archives  BOOLEAN[] := '{}';
    v_i         INT;
    v_before    INT;
    v_held      INT;
    v_created   INT := 0;
    v_dropped   INT := 0;
    v_kept      INT := 0;
    v_timeout   TEXT;
BEGIN
    v_partman := commandbus.cmdbus_require_partman('cmdbus_partition_maintenance');
    IF NOT EXISTS (SELECT 1 FROM pgmq.meta m
                    WHERE m.queue_name = p_queue_name AND m.is_partitioned) THEN
        RAISE EXCEPTION 'cmdbus_partition_maintenance: no partitioned queue %',
            quote_literal(p_queue_name) USING ERRCODE = '22023';
    END IF;
    v_qtable := pgmq.format_table_name(p_queue_name, 'q');
    v_atable := pgmq.format_table_name(p_queue_name, 'a');

    -- 1. The retention (a queue dropped and made again takes its new one).
    DELETE FROM commandbus.cmdbus_partitioned_queue p
     WHERE NOT EXISTS (SELECT 1 FROM pgmq.meta m
                        WHERE m.queue_name = p.queue_name AND m.is_partitioned);
    SELECT p.retention INTO v_retention
      FROM commandbus.cmdbus_partitioned_queue p
     WHERE p.queue_name = p_queue_name;
    IF NOT FOUND THEN
        EXECUTE format('SELECT c.retention FROM %I.part_config c
                         WHERE c.parent_table = $1', v_partman)
           INTO v_retention USING 'pgmq.' || v_atable;
        INSERT INTO commandbus.cmdbus_partitioned_queue (queue_name, retention)
        VALUES (p_queue_name, v_retention);
    END IF;
    EXECUTE format(
        'UPDATE %I.part_config c
            SET retention = NULL,
                infinite_time_partitions = (c.control <> ''msg_id'')
          WHERE c.parent_table IN ($1, $2)
            AND (c.retention IS NOT NULL
                 OR c.infinite_time_partitions IS DISTINCT FROM (c.control <> ''msg_id''))',
        v_partman)
      USING 'pgmq.' || v_qtable, 'pgmq.' || v_atable;

    -- The highest id the queue handed out (archived messages keep theirs).
    EXECUTE format('SELECT CASE WHEN s.is_called THEN s.last_value ELSE 0 END
                      FROM pgmq.%I s', v_qtable || '_msg_id_seq')
       INTO v_high;

    -- 2. What is to do.
    FOR v_cfg IN EXECUTE format(
        'SELECT c.parent_table, c.control, c.partition_interval, c.premake
           FROM %I.part_config c
          WHERE c.parent_table IN ($1, $2)
          ORDER BY c.parent_table = $2',
        v_partman) USING 'pgmq.' || v_qtable, 'pgmq.' || v_atable
    LOOP
        v_parent := v_cfg.parent_table::REGCLASS;
        v_archive := v_cfg.parent_table = 'pgmq.' || v_atable;
        v_parents := v_parents || v_cfg.parent_table;
        v_controls := v_controls || v_cfg.control;

        SELECT c.oid::REGCLASS INTO v_default
          FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
         WHERE i.inhparent = v_parent
           AND pg_get_expr(c.relpartbound, c.oid) = 'DEFAULT';
        v_rows := FALSE;
        IF v_default IS NOT NULL THEN
            EXECUTE format('SELECT EXISTS (SELECT 1 FROM %s)', v_default) INTO v_rows;
        END IF;
        v_moves := v_moves || v_rows;

        -- The first partition ahead that is missing, if any.
        v_start := NULL;
        IF v_cfg.control = 'msg_id' THEN
            v_step := v_cfg.partition_interval::BIGINT;
            v_start := (v_high / v_step) * v_step;
            v_starts := v_starts || v_start::TEXT;
        ELSE
            v_starts := v_starts || NULL::TEXT;
        END IF;
        v_exists := TRUE;
        FOR v_i IN 0 .. v_cfg.premake LOOP
            EXECUTE format('SELECT p.table_exists FROM %I.show_partition_name($1, $2) p',
                           v_partman)
               INTO v_exists
              USING v_cfg.parent_table,
                    CASE WHEN v_cfg.control = 'msg_id'
                         THEN (v_start + v_i * v_step)::TEXT
                         ELSE (clock_timestamp()
                               + v_i * v_cfg.partition_interval::INTERVAL)::TEXT END;
            EXIT WHEN NOT v_exists;
        END LOOP;
        v_creates := v_creates || NOT v_exists;

        CONTINUE WHEN v_retention IS NULL;
        FOR v_child IN
            SELECT format('%I.%I', n.nspname, c.relname) AS name,
                   pg_get_expr(c.relpartbound, c.oid) AS bound
              FROM pg_inherits i
              JOIN pg_class c ON c.oid = i.inhrelid
              JOIN pg_namespace n ON n.oid = c.relnamespace
             WHERE i.inhparent = v_parent
        LOOP
            v_bounds := regexp_match(v_child.bound,
                                     '^FOR VALUES FROM \(''([^'']*)''\) TO \(''([^'']*)''\)$');
            CONTINUE WHEN v_bounds IS NULL;
            v_past := CASE WHEN v_cfg.control = 'msg_id'
                           THEN v_bounds[2]::BIGINT <= v_high - v_retention::BIGINT
                           ELSE v_bounds[2]::TIMESTAMPTZ
                                <= clock_timestamp() - v_retention::INTERVAL END;
            CONTINUE WHEN NOT v_past;
            IF commandbus.cmdbus_partition_held(v_child.name, v_archive) THEN
                v_kept := v_kept + 1;
            ELSE
                v_tables := v_tables || v_child.name;
                v_archives := v_archives || v_archive;
            END IF;
        END LOOP;
    END LOOP;

    IF cardinality(v_tables) = 0 AND NOT (TRUE = ANY (v_moves))
       AND NOT (TRUE = ANY (v_creates)) THEN
        RETURN QUERY SELECT 0, 0, v_kept;
        RETURN;
    END IF;

    -- 3. Under the lock of both parents.
    v_timeout := current_setting('lock_timeout');
    PERFORM set_config('lock_timeout',
                       (extract(epoch FROM p_lock_timeout) * 1000)::BIGINT::TEXT || 'ms',
                       true);
    BEGIN
        EXECUTE format('LOCK TABLE pgmq.%I, pgmq.%I IN ACCESS EXCLUSIVE MODE',
                       v_qtable, v_atable);
        FOR v_i IN 1 .. cardinality(v_parents) LOOP
            v_parent := v_parents[v_i]::REGCLASS;
            SELECT count(*) INTO v_before FROM pg_inherits i WHERE i.inhparent = v_parent;
            IF v_moves[v_i] THEN
                EXECUTE format('SELECT %I.%I($1, $2)', v_partman,
                               CASE WHEN v_controls[v_i] = 'msg_id'
                                    THEN 'partition_data_id'
                                    ELSE 'partition_data_time' END)
                  USING v_parents[v_i], 1000000;
            END IF;
            IF v_creates[v_i] THEN
                IF v_controls[v_i] = 'msg_id' THEN
                    EXECUTE format(
                        'SELECT %I.create_partition_id($1, ARRAY(
                           SELECT $2::BIGINT + g * c.partition_interval::BIGINT
                             FROM %I.part_config c, generate_series(0, c.premake) g
                            WHERE c.parent_table = $1))',
                        v_partman, v_partman)
                      USING v_parents[v_i], v_starts[v_i];
                ELSE
                    EXECUTE format('SELECT %I.run_maintenance($1, false, false)', v_partman)
                      USING v_parents[v_i];
                END IF;
            END IF;
            v_created := v_created
                         + (SELECT count(*) FROM pg_inherits i WHERE i.inhparent = v_parent)
                         - v_before;
        END LOOP;
        v_held := 0;
        FOR v_i IN 1 .. cardinality(v_tables) LOOP
            IF commandbus.cmdbus_partition_held(v_tables[v_i], v_archives[v_i]) THEN
                v_held := v_held + 1;
            ELSE
                EXECUTE format('DROP TABLE %s', v_tables[v_i]);
                v_dropped := v_dropped + 1;
            END IF;
        END LOOP;
        v_kept := v_kept + v_held;
    EXCEPTION WHEN lock_not_available OR deadlock_detected THEN
        v_kept := v_kept + cardinality(v_tables);
        v_created := 0;
        v_dropped := 0;
    END;
    PERFORM set_config('lock_timeout', v_timeout, true);

    RETURN QUERY SELECT v_created, v_dropped, v_kept;
END;
$fn$;

REVOKE ALL ON FUNCTION commandbus.cmdbus_partition_maintenance(TEXT, INTERVAL) FROM PUBLIC;
