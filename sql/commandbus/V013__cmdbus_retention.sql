-- Retention (docs/operations.md, "Retention"): removing old finished history
-- in bounded chunks. Added beside the reference schema; nothing of it
-- changes.
--
-- Each cmdbus_prune_* function removes at most p_limit rows of one kind
-- (with what belongs to them) that became final more than p_age ago, and
-- returns what it removed. One call is meant to be one short transaction:
-- the rows it picks are locked with SKIP LOCKED (two pruners never wait on
-- each other), and a row and its dependants go in the same transaction, so
-- an interrupted prune leaves either both or neither:
--   command  -> its audit rows (commandbus.audit, by domain and command id)
--   process  -> its process_audit rows
--   batch    -> its BATCH_* audit rows (command_id holds the batch id) and
--               its delivered callback record (cmdbus_batch_delivery)
-- What is never removed, whatever its age (cmdbus_command_held and the
-- conditions below):
--   - a command that is not final: PENDING, IN_PROGRESS, or in the
--     troubleshooting queue (IN_TROUBLESHOOTING_QUEUE);
--   - a command of a batch that is not final (the batch's counters are
--     recomputed from its commands), or one that a process not yet final
--     refers to (a process_audit row of it, or the process's id as its
--     correlation id);
--   - a process that is not final, or of a batch that is not final;
--   - a batch that is not final, whose callbacks were not delivered yet, or
--     that still has commands or processes (they go first);
--   - an archived message whose command is still there and not final (a
--     command in the troubleshooting queue is retried from it).
-- Ages count from when a row became final: a command's and a process's
-- updated_at, a batch's completed_at, a message's archived_at.
--
-- cmdbus_prune_preview counts what a whole prune with the given ages would
-- remove (the same conditions), for dry runs.

-- Final statuses, one place each.
CREATE FUNCTION commandbus.cmdbus_command_final(p_status TEXT)
RETURNS BOOLEAN
LANGUAGE sql IMMUTABLE
AS $$ SELECT p_status IN ('COMPLETED', 'FAILED', 'CANCELED') $$;

CREATE FUNCTION commandbus.cmdbus_process_final(p_status TEXT)
RETURNS BOOLEAN
LANGUAGE sql IMMUTABLE
AS $$ SELECT p_status IN ('COMPLETED', 'COMPENSATED', 'FAILED', 'CANCELED') $$;

CREATE FUNCTION commandbus.cmdbus_batch_final(p_status TEXT)
RETURNS BOOLEAN
LANGUAGE sql IMMUTABLE
AS $$ SELECT p_status IN ('COMPLETED', 'COMPLETED_WITH_FAILURES') $$;

-- Whether a final command must stay because something not final refers to
-- it: its batch (not final), or a process not final (through a
-- process_audit row of the command, or the command's correlation id).
CREATE FUNCTION commandbus.cmdbus_command_held(
    p_domain         TEXT,
    p_command_id     UUID,
    p_correlation_id UUID,
    p_batch_id       UUID
) RETURNS BOOLEAN
LANGUAGE sql STABLE
AS $$
    SELECT (p_batch_id IS NOT NULL AND EXISTS (
               SELECT 1 FROM commandbus.batch b
                WHERE b.domain = p_domain AND b.batch_id = p_batch_id
                  AND NOT commandbus.cmdbus_batch_final(b.status)))
        OR EXISTS (
               SELECT 1
                 FROM commandbus.process_audit pa
                 JOIN commandbus.process p
                   ON p.domain = pa.domain AND p.process_id = pa.process_id
                WHERE pa.command_id = p_command_id
                  AND NOT commandbus.cmdbus_process_final(p.status))
        OR (p_correlation_id IS NOT NULL AND EXISTS (
               SELECT 1 FROM commandbus.process p
                WHERE p.process_id = p_correlation_id
                  AND NOT commandbus.cmdbus_process_final(p.status)))
$$;

-- Whether a final process must stay: its batch is not final.
CREATE FUNCTION commandbus.cmdbus_process_held(
    p_domain   TEXT,
    p_batch_id UUID
) RETURNS BOOLEAN
LANGUAGE sql STABLE
AS $$
    SELECT p_batch_id IS NOT NULL AND EXISTS (
               SELECT 1 FROM commandbus.batch b
                WHERE b.domain = p_domain AND b.batch_id = p_batch_id
                  AND NOT commandbus.cmdbus_batch_final(b.status))
$$;

-- Checks the arguments every prune function takes (22023 otherwise).
CREATE FUNCTION commandbus.cmdbus_prune_check(
    p_what  TEXT,
    p_age   INTERVAL,
    p_limit INT
) RETURNS VOID
LANGUAGE plpgsql
AS $$
BEGIN
    IF p_age IS NULL OR p_age < interval '0' THEN
        RAISE EXCEPTION '%: invalid age %', p_what, quote_nullable(p_age)
            USING ERRCODE = '22023';
    END IF;
    IF p_limit IS NULL OR p_limit < 1 THEN
        RAISE EXCEPTION '%: invalid limit %', p_what, quote_nullable(p_limit)
            USING ERRCODE = '22023';
    END IF;
END;
$$;

-- Removes up to p_limit final commands of p_domain (NULL: every domain)
-- last updated more than p_age ago, oldest first, with their audit rows.
CREATE FUNCTION commandbus.cmdbus_prune_commands(
    p_domain TEXT,
    p_age    INTERVAL,
    p_limit  INT
) RETURNS TABLE(commands BIGINT, audits BIGINT)
LANGUAGE plpgsql
AS $$
DECLARE
    v_before TIMESTAMPTZ;
BEGIN
    PERFORM commandbus.cmdbus_prune_check('cmdbus_prune_commands', p_age,
                                          p_limit);
    v_before := clock_timestamp() - p_age;
    RETURN QUERY
    WITH victims AS (
        SELECT c.domain, c.command_id
          FROM commandbus.command c
         WHERE c.updated_at < v_before
           AND (p_domain IS NULL OR c.domain = p_domain)
           AND commandbus.cmdbus_command_final(c.status)
           AND NOT commandbus.cmdbus_command_held(c.domain, c.command_id,
                                                  c.correlation_id, c.batch_id)
         ORDER BY c.updated_at
         LIMIT p_limit
           FOR UPDATE OF c SKIP LOCKED
    ), gone_audits AS (
        DELETE FROM commandbus.audit a
         USING victims v
         WHERE a.command_id = v.command_id
           AND a.domain = v.domain
        RETURNING 1
    ), gone AS (
        DELETE FROM commandbus.command c
         USING victims v
         WHERE c.domain = v.domain
           AND c.command_id = v.command_id
        RETURNING 1
    )
    SELECT (SELECT count(*) FROM gone), (SELECT count(*) FROM gone_audits);
END;
$$;

-- Removes up to p_limit final processes of p_domain (NULL: every domain)
-- last updated more than p_age ago, with their process_audit rows.
CREATE FUNCTION commandbus.cmdbus_prune_processes(
    p_domain TEXT,
    p_age    INTERVAL,
    p_limit  INT
) RETURNS TABLE(processes BIGINT, audits BIGINT)
LANGUAGE plpgsql
AS $$
DECLARE
    v_before  TIMESTAMPTZ;
    v_domains TEXT[];
    v_ids     UUID[];
    v_audits  BIGINT;
    v_count   BIGINT;
BEGIN
    PERFORM commandbus.cmdbus_prune_check('cmdbus_prune_processes', p_age,
                                          p_limit);
    v_before := clock_timestamp() - p_age;
    SELECT array_agg(x.domain), array_agg(x.process_id)
      INTO v_domains, v_ids
      FROM (SELECT p.domain, p.process_id
              FROM commandbus.process p
             WHERE p.updated_at < v_before
               AND (p_domain IS NULL OR p.domain = p_domain)
               AND commandbus.cmdbus_process_final(p.status)
               AND NOT commandbus.cmdbus_process_held(p.domain, p.batch_id)
             LIMIT p_limit
               FOR UPDATE OF p SKIP LOCKED) x;
    IF v_ids IS NULL THEN
        RETURN QUERY SELECT 0::BIGINT, 0::BIGINT;
        RETURN;
    END IF;
    -- The audit rows first: they refer to the process (foreign key).
    DELETE FROM commandbus.process_audit pa
     USING unnest(v_domains, v_ids) AS v(domain, process_id)
     WHERE pa.domain = v.domain AND pa.process_id = v.process_id;
    GET DIAGNOSTICS v_audits = ROW_COUNT;
    DELETE FROM commandbus.process p
     USING unnest(v_domains, v_ids) AS v(domain, process_id)
     WHERE p.domain = v.domain AND p.process_id = v.process_id;
    GET DIAGNOSTICS v_count = ROW_COUNT;
    RETURN QUERY SELECT v_count, v_audits;
END;
$$;

-- Removes up to p_limit final batches of p_domain (NULL: every domain)
-- completed more than p_age ago that have no commands and no processes left
-- and whose callbacks (if any were recorded) were delivered, with their
-- BATCH_* audit rows and their delivery record.
CREATE FUNCTION commandbus.cmdbus_prune_batches(
    p_domain TEXT,
    p_age    INTERVAL,
    p_limit  INT
) RETURNS TABLE(batches BIGINT, audits BIGINT)
LANGUAGE plpgsql
AS $$
DECLARE
    v_before TIMESTAMPTZ;
BEGIN
    PERFORM commandbus.cmdbus_prune_check('cmdbus_prune_batches', p_age,
                                          p_limit);
    v_before := clock_timestamp() - p_age;
    RETURN QUERY
    WITH victims AS (
        SELECT b.domain, b.batch_id
          FROM commandbus.batch b
         WHERE (p_domain IS NULL OR b.domain = p_domain)
           AND commandbus.cmdbus_batch_final(b.status)
           AND COALESCE(b.completed_at, b.created_at) < v_before
           AND NOT EXISTS (SELECT 1 FROM commandbus.command c
                            WHERE c.domain = b.domain
                              AND c.batch_id = b.batch_id)
           AND NOT EXISTS (SELECT 1 FROM commandbus.process p
                            WHERE p.batch_id = b.batch_id)
           AND NOT EXISTS (SELECT 1 FROM commandbus.cmdbus_batch_delivery d
                            WHERE d.domain = b.domain
                              AND d.batch_id = b.batch_id
                              AND d.delivered_at IS NULL)
         LIMIT p_limit
           FOR UPDATE OF b SKIP LOCKED
    ), gone_audits AS (
        DELETE FROM commandbus.audit a
         USING victims v
         WHERE a.command_id = v.batch_id
           AND a.domain = v.domain
        RETURNING 1
    ), gone_deliveries AS (
        DELETE FROM commandbus.cmdbus_batch_delivery d
         USING victims v
         WHERE d.domain = v.domain
           AND d.batch_id = v.batch_id
        RETURNING 1
    ), gone AS (
        DELETE FROM commandbus.batch b
         USING victims v
         WHERE b.domain = v.domain
           AND b.batch_id = v.batch_id
        RETURNING 1
    )
    -- (every data-modifying part runs, gone_deliveries too)
    SELECT (SELECT count(*) FROM gone), (SELECT count(*) FROM gone_audits);
END;
$$;

-- The queues whose archives a prune of p_domain covers: those named
-- "<p_domain>__..." (the command queue, the process reply queue and the
-- domain's own reply queues of that form); NULL: every queue.
CREATE FUNCTION commandbus.cmdbus_prune_queues(p_domain TEXT)
RETURNS SETOF TEXT
LANGUAGE sql STABLE
AS $$
    SELECT m.queue_name::TEXT
      FROM pgmq.meta m
     WHERE p_domain IS NULL
        OR left(m.queue_name::TEXT, length(p_domain) + 2) = p_domain || '__'
     ORDER BY m.queue_name
$$;

-- The archived messages of queue p_queue that a prune with age p_age may
-- remove, as a query over "pgmq.<archive table> a" ($1: the cutoff time).
-- Kept in one place for the prune and the preview.
CREATE FUNCTION commandbus.cmdbus_archive_prunable_sql(p_queue TEXT)
RETURNS TEXT
LANGUAGE sql STABLE
AS $$
    SELECT format(
        'SELECT a.msg_id FROM pgmq.%I a WHERE a.archived_at < $1 '
        'AND NOT EXISTS (SELECT 1 FROM commandbus.command c '
        'WHERE c.domain = a.message->>''domain'' '
        'AND c.command_id = CASE WHEN a.message->>''command_id'' ~* '
        '''^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$'' '
        'THEN (a.message->>''command_id'')::uuid END '
        'AND NOT commandbus.cmdbus_command_final(c.status))',
        pgmq.format_table_name(p_queue, 'a'))
$$;

-- Removes up to p_limit messages of queue p_queue's archive archived more
-- than p_age ago, oldest first, except those of commands that are still
-- there and not final. A queue PGMQ does not know removes nothing.
CREATE FUNCTION commandbus.cmdbus_prune_archive(
    p_queue TEXT,
    p_age   INTERVAL,
    p_limit INT
) RETURNS BIGINT
LANGUAGE plpgsql
AS $$
DECLARE
    v_count BIGINT;
BEGIN
    PERFORM commandbus.cmdbus_prune_check('cmdbus_prune_archive', p_age,
                                          p_limit);
    IF NOT EXISTS (SELECT 1 FROM pgmq.meta m
                    WHERE m.queue_name = p_queue) THEN
        RETURN 0;
    END IF;
    EXECUTE format(
        'WITH victims AS (%s ORDER BY a.archived_at LIMIT $2 '
        'FOR UPDATE OF a SKIP LOCKED) '
        'DELETE FROM pgmq.%I x USING victims v WHERE x.msg_id = v.msg_id',
        commandbus.cmdbus_archive_prunable_sql(p_queue),
        pgmq.format_table_name(p_queue, 'a'))
      USING clock_timestamp() - p_age, p_limit;
    GET DIAGNOSTICS v_count = ROW_COUNT;
    RETURN v_count;
END;
$$;

-- Counts what a whole prune of p_domain (NULL: every domain) with these ages
-- would remove (NULL age: that kind is not pruned): the number of rows `n`
-- of each `kind` (commands, command_audits, processes, process_audits, batches,
-- batch_audits, archived_messages). A batch counts when its commands and
-- processes would all be removed before it. Changes nothing.
CREATE FUNCTION commandbus.cmdbus_prune_preview(
    p_domain      TEXT,
    p_command_age INTERVAL,
    p_process_age INTERVAL,
    p_batch_age   INTERVAL,
    p_archive_age INTERVAL
) RETURNS TABLE(kind TEXT, n BIGINT)
LANGUAGE plpgsql STABLE
AS $$
DECLARE
    v_now      TIMESTAMPTZ := clock_timestamp();
    v_commands BIGINT := 0;
    v_caudits  BIGINT := 0;
    v_procs    BIGINT := 0;
    v_paudits  BIGINT := 0;
    v_batches  BIGINT := 0;
    v_baudits  BIGINT := 0;
    v_archived BIGINT := 0;
    v_n        BIGINT;
    v_queue    TEXT;
BEGIN
    IF p_command_age IS NOT NULL THEN
        SELECT count(*), COALESCE(sum(
                   (SELECT count(*) FROM commandbus.audit a
                     WHERE a.command_id = c.command_id
                       AND a.domain = c.domain)), 0)
          INTO v_commands, v_caudits
          FROM commandbus.command c
         WHERE c.updated_at < v_now - p_command_age
           AND (p_domain IS NULL OR c.domain = p_domain)
           AND commandbus.cmdbus_command_final(c.status)
           AND NOT commandbus.cmdbus_command_held(c.domain, c.command_id,
                                                  c.correlation_id, c.batch_id);
    END IF;
    IF p_process_age IS NOT NULL THEN
        SELECT count(*), COALESCE(sum(
                   (SELECT count(*) FROM commandbus.process_audit pa
                     WHERE pa.domain = p.domain
                       AND pa.process_id = p.process_id)), 0)
          INTO v_procs, v_paudits
          FROM commandbus.process p
         WHERE p.updated_at < v_now - p_process_age
           AND (p_domain IS NULL OR p.domain = p_domain)
           AND commandbus.cmdbus_process_final(p.status)
           AND NOT commandbus.cmdbus_process_held(p.domain, p.batch_id);
    END IF;
    IF p_batch_age IS NOT NULL THEN
        SELECT count(*), COALESCE(sum(
                   (SELECT count(*) FROM commandbus.audit a
                     WHERE a.command_id = b.batch_id
                       AND a.domain = b.domain)), 0)
          INTO v_batches, v_baudits
          FROM commandbus.batch b
         WHERE (p_domain IS NULL OR b.domain = p_domain)
           AND commandbus.cmdbus_batch_final(b.status)
           AND COALESCE(b.completed_at, b.created_at) < v_now - p_batch_age
           AND NOT EXISTS (
                   SELECT 1 FROM commandbus.command c
                    WHERE c.domain = b.domain AND c.batch_id = b.batch_id
                      AND NOT (p_command_age IS NOT NULL
                               AND c.updated_at < v_now - p_command_age
                               AND commandbus.cmdbus_command_final(c.status)
                               AND NOT commandbus.cmdbus_command_held(
                                   c.domain, c.command_id, c.correlation_id,
                                   c.batch_id)))
           AND NOT EXISTS (
                   SELECT 1 FROM commandbus.process p
                    WHERE p.batch_id = b.batch_id
                      AND NOT (p_process_age IS NOT NULL
                               AND p.updated_at < v_now - p_process_age
                               AND commandbus.cmdbus_process_final(p.status)
                               AND NOT commandbus.cmdbus_process_held(
                                   p.domain, p.batch_id)))
           AND NOT EXISTS (SELECT 1 FROM commandbus.cmdbus_batch_delivery d
                            WHERE d.domain = b.domain
                              AND d.batch_id = b.batch_id
                              AND d.delivered_at IS NULL);
    END IF;
    IF p_archive_age IS NOT NULL THEN
        FOR v_queue IN SELECT q FROM commandbus.cmdbus_prune_queues(p_domain) q
        LOOP
            EXECUTE format('SELECT count(*) FROM (%s) x',
                           commandbus.cmdbus_archive_prunable_sql(v_queue))
               INTO v_n
              USING v_now - p_archive_age;
            v_archived := v_archived + v_n;
        END LOOP;
    END IF;
    RETURN QUERY
    SELECT v.k, v.c
      FROM (VALUES ('commands', v_commands), ('command_audits', v_caudits),
                   ('processes', v_procs), ('process_audits', v_paudits),
                   ('batches', v_batches), ('batch_audits', v_baudits),
                   ('archived_messages', v_archived)) AS v(k, c);
END;
$$;
