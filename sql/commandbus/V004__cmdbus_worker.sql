-- cmdbus's own set-based worker functions, added beside the reference
-- procedures (nothing of the reference changes). Each processes a whole read
-- batch with one call, performing for every message exactly the writes of
-- the reference worker's transaction (its receive, complete and fail steps,
-- with the audit rows and statuses of sp_receive_command, sp_finish_command
-- and sp_fail_command):
--   cmdbus_receive           pgmq.read + sp_receive_command per message
--                            (+ the receive guard, docs/design.md)
--   cmdbus_complete          pgmq.delete + sp_finish_command(COMPLETED)
--                            + SUCCESS replies + NOTIFY
--   cmdbus_fail_final        pgmq.archive + sp_finish_command(
--                            IN_TROUBLESHOOTING_QUEUE | FAILED)
--                            + FAILED replies (business rule only)
--   cmdbus_fail_transient    sp_fail_command + pgmq.set_vt(backoff)
--   cmdbus_extend_visibility pgmq.set_vt (lease heartbeat, docs/design.md)
-- with one statement per table and step instead of one call per command.
-- Batch counters follow sp_finish_command / sp_update_batch_counters
-- (docs/design.md, "Inline batch counters"): a command's transition is
-- counted once, only when its status really changes; the deltas of one call
-- are aggregated per batch and applied with one UPDATE per batch row
-- (cmdbus_apply_batch_deltas).
--
-- The receive guard (docs/design.md, "Receive guard": unknown and terminal
-- commands are archived and skipped) audits skipped messages with our own
-- event type RECEIVE_SKIPPED {msg_id, reason, status}.
--
-- Arrays are parallel: element i of every array describes the same message.
-- p_msg_ids fixes the length n; p_command_ids must have n non-NULL elements;
-- every other array must have n elements, or be NULL, which stands for n
-- NULLs. An empty (or NULL) p_msg_ids makes the call a no-op.
--
-- Lock order everywhere (as in V002, with the queue first): queue message
-- rows, then command rows in command_id order, then batch rows in batch_id
-- order, so concurrent calls never deadlock on each other. (Several calls in
-- one transaction can: run each call in its own transaction.)
--
-- Audit timestamps: the rows written here take clock_timestamp(), not the
-- column default NOW() (the transaction start), so that an audit trail
-- ordered by (ts, audit_id) follows causality even when a receive statement
-- starts before the retry that makes its message visible commits.
--
-- Plans: the statements must not depend on planner statistics, which are
-- stale after any burst on a new domain (`domain = 'x'` is then estimated at
-- a few rows, which once made the planner scan a whole domain per call). So
-- every lookup of the id set is one index probe per id:
-- - rows are found and locked by a LATERAL subquery per id, `FROM <ids,
--   sorted> CROSS JOIN LATERAL (SELECT ... WHERE domain = .. AND id = x.id
--   LIMIT 1 FOR UPDATE)`: the LIMIT keeps it from being flattened, so it is
--   a nested loop with a unique-index probe per id, locking in the order of
--   the sorted ids. commandbus.batch has other indexes leading with domain,
--   so its probes take the domain from the outer row (a parameter, not a
--   constant the statistics know nothing about) and ORDER BY batch_id,
--   which leaves the primary key as the only sensible index;
-- - the locked rows are then updated by ctid, joined to the arrays with
--   `c.ctid = f.tid` and no other condition on the table (a nested loop of
--   TID scans; a filter on the table could be estimated at one row and turn
--   the join into a nested loop over a sequential scan). The ctids are
--   current: the rows are locked by us and not updated in between;
-- - the queue tables are accessed by msg_id = ANY (primary-key probes).
--
-- cmdbus_check_lengths, cmdbus_finish_commands and cmdbus_apply_batch_deltas
-- are helpers of the five worker functions, not a client API.
--
-- Errors raised with SQLSTATE 22023 (invalid_parameter_value): arrays of
-- different lengths, NULL command ids, an unknown cmdbus_fail_final kind, an
-- invalid reply queue name (PGMQ's rule: 1-47 letters, digits,
-- underscores) or a reply_to without a reply. Callers validate reply_to
-- beforehand (db::validate_queue_name) and pass NULL for a command without a
-- usable one; otherwise the whole call rolls back.

-- -- helpers -----------------------------------------------------------------

-- Raises 22023 unless every length in p_lengths is NULL (a NULL array) or
-- equal to p_n. p_names names the arrays for the message.
CREATE FUNCTION commandbus.cmdbus_check_lengths(
    p_function TEXT,
    p_n        INT,
    p_names    TEXT[],
    p_lengths  INT[]
) RETURNS VOID
LANGUAGE plpgsql
AS $$
DECLARE
    v_i INT;
BEGIN
    FOR v_i IN 1 .. COALESCE(cardinality(p_lengths), 0) LOOP
        IF p_lengths[v_i] IS NOT NULL AND p_lengths[v_i] <> p_n THEN
            RAISE EXCEPTION '%: % has % elements, expected % (arrays must have equal lengths)',
                p_function, p_names[v_i], p_lengths[v_i], p_n
                USING ERRCODE = '22023';
        END IF;
    END LOOP;
END;
$$;

-- -- cmdbus_apply_batch_deltas -----------------------------------------------

-- Applies aggregated counter deltas to batches with the rules of
-- sp_update_batch_counters: one UPDATE for all batches (each row updated
-- once, locked in batch_id order first); deltas of repeated batch ids are
-- summed; NULL or missing batches are ignored. A batch that is not yet
-- terminal and now has completed + canceled + failed = total and nothing in
-- the TSQ becomes COMPLETED (COMPLETED_WITH_FAILURES if anything was canceled
-- or failed), gets completed_at and an audit BATCH_COMPLETED (command_id =
-- batch_id). Returns one row per updated batch (batch_id order) with whether
-- it just became terminal. Used by cmdbus_complete and cmdbus_fail_final;
-- also usable by a batch-counter actor.
CREATE FUNCTION commandbus.cmdbus_apply_batch_deltas(
    p_domain    TEXT,
    p_batch_ids UUID[],
    p_completed INT[],
    p_failed    INT[],
    p_canceled  INT[],
    p_tsq       INT[]
) RETURNS TABLE(batch_id UUID, batch_complete BOOLEAN)
LANGUAGE plpgsql
AS $$
DECLARE
    v_n    INT := COALESCE(cardinality(p_batch_ids), 0);
    v_tids TID[];
    v_done BOOLEAN[];
    v_dc   INT[];
    v_df   INT[];
    v_dx   INT[];
    v_dt   INT[];
BEGIN
    PERFORM commandbus.cmdbus_check_lengths(
        'cmdbus_apply_batch_deltas', v_n,
        ARRAY['p_completed', 'p_failed', 'p_canceled', 'p_tsq'],
        ARRAY[cardinality(p_completed), cardinality(p_failed),
              cardinality(p_canceled), cardinality(p_tsq)]);
    IF v_n = 0 THEN
        RETURN;
    END IF;

    -- Lock the batch rows in batch_id order, one primary-key probe per id
    -- (see "Plans" at the top), and decide on the locked (current) values
    -- plus the summed deltas whether each batch now becomes terminal. The
    -- ctids stay valid until our UPDATE below: the rows are locked by us.
    SELECT array_agg(l.tid ORDER BY l.batch_id),
           array_agg(l.done ORDER BY l.batch_id),
           array_agg(l.dc ORDER BY l.batch_id),
           array_agg(l.df ORDER BY l.batch_id),
           array_agg(l.dx ORDER BY l.batch_id),
           array_agg(l.dt ORDER BY l.batch_id)
      INTO v_tids, v_done, v_dc, v_df, v_dx, v_dt
      FROM (SELECT t.batch_id, b.tid, t.dc, t.df, t.dx, t.dt,
                   b.status NOT IN ('COMPLETED', 'COMPLETED_WITH_FAILURES')
                   AND b.completed_count + t.dc + b.canceled_count + t.dx
                       + b.failed_count + t.df = b.total_count
                   AND b.in_troubleshooting_count + t.dt = 0 AS done
              FROM (SELECT p_domain AS domain, x.batch_id,
                           COALESCE(sum(x.completed), 0)::int AS dc,
                           COALESCE(sum(x.failed), 0)::int    AS df,
                           COALESCE(sum(x.canceled), 0)::int  AS dx,
                           COALESCE(sum(x.tsq), 0)::int       AS dt
                      FROM unnest(p_batch_ids, p_completed, p_failed,
                                  p_canceled, p_tsq)
                           AS x(batch_id, completed, failed, canceled, tsq)
                     WHERE x.batch_id IS NOT NULL
                     GROUP BY x.batch_id
                     ORDER BY x.batch_id) t
             CROSS JOIN LATERAL (
                   SELECT b.ctid AS tid, b.status, b.total_count,
                          b.completed_count, b.canceled_count, b.failed_count,
                          b.in_troubleshooting_count
                     FROM commandbus.batch b
                    WHERE b.domain = t.domain
                      AND b.batch_id = t.batch_id
                    ORDER BY b.batch_id
                    LIMIT 1
                      FOR UPDATE) b) l;

    IF v_tids IS NULL THEN
        RETURN;
    END IF;

    -- One UPDATE of the locked rows by ctid.
    RETURN QUERY
    WITH upd AS (
        UPDATE commandbus.batch b
           SET completed_count = b.completed_count + d.dc,
               failed_count = b.failed_count + d.df,
               canceled_count = b.canceled_count + d.dx,
               in_troubleshooting_count = b.in_troubleshooting_count + d.dt,
               status = CASE
                   WHEN NOT d.done THEN b.status
                   WHEN b.canceled_count + d.dx > 0 OR b.failed_count + d.df > 0
                       THEN 'COMPLETED_WITH_FAILURES'
                   ELSE 'COMPLETED'
               END,
               completed_at = CASE WHEN d.done THEN NOW() ELSE b.completed_at END
          FROM unnest(v_tids, v_done, v_dc, v_df, v_dx, v_dt)
               AS d(tid, done, dc, df, dx, dt)
         WHERE b.ctid = d.tid
        RETURNING b.batch_id, b.total_count, b.completed_count,
                  b.canceled_count, b.failed_count, d.done
    ), aud AS (
        INSERT INTO commandbus.audit (ts, domain, command_id, event_type, details_json)
        SELECT clock_timestamp(), p_domain, u.batch_id, 'BATCH_COMPLETED',
               jsonb_build_object('batch_id', u.batch_id,
                                  'total_count', u.total_count,
                                  'completed_count', u.completed_count,
                                  'canceled_count', u.canceled_count,
                                  'failed_count', u.failed_count)
          FROM upd u
         WHERE u.done
         ORDER BY u.batch_id
    )
    SELECT u.batch_id, u.done FROM upd u ORDER BY u.batch_id;
END;
$$;

-- -- cmdbus_finish_commands --------------------------------------------------

-- The common body of cmdbus_complete and cmdbus_fail_final (sp_finish_command
-- for many commands, arguments already validated by the caller):
-- 1. removes the messages: p_remove 'delete' (pgmq.delete) or 'archive'
--    (pgmq.archive), array forms;
-- 2. locks the command rows (command_id order) and keeps their old status;
-- 3. one UPDATE of the rows whose status differs from p_status: status,
--    last_error_* = COALESCE(new, old), updated_at (a command given twice
--    takes the values of its first occurrence, as two sequential calls would);
-- 4. one INSERT of an audit p_event_type with p_details[i] for every element,
--    in input order (also for unknown commands and non-transitions);
-- 5. replies: per distinct non-empty reply_to (sorted) the queue is created
--    if missing, one pgmq.send_batch of its replies (input order) and one
--    NOTIFY pgmq_notify_{queue}; p_reply_tos NULL sends nothing;
-- 6. batch deltas of the real transitions (the rules of sp_finish_command),
--    aggregated per batch of the command row and applied by
--    cmdbus_apply_batch_deltas:
--      IN_PROGRESS              -> COMPLETED                 complete
--      IN_TROUBLESHOOTING_QUEUE -> COMPLETED                 tsq_complete
--      IN_PROGRESS              -> IN_TROUBLESHOOTING_QUEUE  tsq_move
--      IN_PROGRESS              -> FAILED                    failed
-- Returns the batches with a counted transition and whether each just
-- became terminal.
CREATE FUNCTION commandbus.cmdbus_finish_commands(
    p_domain      TEXT,
    p_queue_name  TEXT,
    p_remove      TEXT,
    p_status      TEXT,
    p_event_type  TEXT,
    p_msg_ids     BIGINT[],
    p_command_ids UUID[],
    p_error_types TEXT[],
    p_error_codes TEXT[],
    p_error_msgs  TEXT[],
    p_details     JSONB[],
    p_reply_tos   TEXT[],
    p_replies     JSONB[]
) RETURNS TABLE(batch_id UUID, batch_complete BOOLEAN)
LANGUAGE plpgsql
AS $$
DECLARE
    v_ids       UUID[];
    v_old       TEXT[];
    v_batches   UUID[];
    v_tids      TID[];
    v_err_types TEXT[];
    v_err_codes TEXT[];
    v_err_msgs  TEXT[];
    v_queue     TEXT;
    v_d_batch   UUID[];
    v_d_done    INT[];
    v_d_failed  INT[];
    v_d_tsq     INT[];
BEGIN
    -- 1. messages (queue rows come first in the lock order)
    IF p_remove = 'delete' THEN
        PERFORM pgmq.delete(p_queue_name, p_msg_ids);
    ELSIF p_remove = 'archive' THEN
        PERFORM pgmq.archive(p_queue_name, p_msg_ids);
    ELSE
        RAISE EXCEPTION 'cmdbus_finish_commands: unknown p_remove %',
            quote_nullable(p_remove) USING ERRCODE = '22023';
    END IF;

    -- 2. lock (command_id order, one index probe per id, see "Plans" at the
    --    top), remember the old status, batch and ctid of each known
    --    command, with the error values of its first occurrence (a command
    --    given twice takes those, as two sequential calls would)
    SELECT array_agg(l.command_id ORDER BY l.command_id),
           array_agg(l.status ORDER BY l.command_id),
           array_agg(l.batch_id ORDER BY l.command_id),
           array_agg(l.tid ORDER BY l.command_id),
           array_agg(l.error_type ORDER BY l.command_id),
           array_agg(l.error_code ORDER BY l.command_id),
           array_agg(l.error_msg ORDER BY l.command_id)
      INTO v_ids, v_old, v_batches, v_tids, v_err_types, v_err_codes,
           v_err_msgs
      FROM (SELECT x.command_id, c.status, c.batch_id, c.tid, x.error_type,
                   x.error_code, x.error_msg
              FROM (SELECT DISTINCT ON (t.command_id)
                           t.command_id, t.error_type, t.error_code,
                           t.error_msg
                      FROM unnest(p_command_ids, p_error_types, p_error_codes,
                                  p_error_msgs) WITH ORDINALITY
                           AS t(command_id, error_type, error_code, error_msg,
                                ord)
                     WHERE t.command_id IS NOT NULL
                     ORDER BY t.command_id, t.ord) x
             CROSS JOIN LATERAL (
                   SELECT c.ctid AS tid, c.status, c.batch_id
                     FROM commandbus.command c
                    WHERE c.domain = p_domain
                      AND c.command_id = x.command_id
                    LIMIT 1
                      FOR UPDATE) c) l;

    -- 3. real transitions: one UPDATE of the locked rows by ctid
    IF v_ids IS NOT NULL AND EXISTS (
           SELECT 1 FROM unnest(v_old) AS o(status) WHERE o.status <> p_status) THEN
        UPDATE commandbus.command c
           SET status = p_status,
               last_error_type = COALESCE(f.error_type, c.last_error_type),
               last_error_code = COALESCE(f.error_code, c.last_error_code),
               last_error_msg = COALESCE(f.error_msg, c.last_error_msg),
               updated_at = NOW()
          FROM unnest(v_tids, v_old, v_err_types, v_err_codes, v_err_msgs)
               AS f(tid, status, error_type, error_code, error_msg)
         WHERE c.ctid = f.tid
           AND f.status <> p_status;
    END IF;

    -- 4. audits
    INSERT INTO commandbus.audit (ts, domain, command_id, event_type, details_json)
    SELECT clock_timestamp(), p_domain, t.command_id, p_event_type, t.details
      FROM unnest(p_command_ids, p_details) WITH ORDINALITY
           AS t(command_id, details, ord)
     ORDER BY t.ord;

    -- 5. replies
    FOR v_queue IN
        SELECT DISTINCT r.reply_to
          FROM unnest(p_reply_tos) AS r(reply_to)
         WHERE r.reply_to IS NOT NULL AND r.reply_to <> ''
         ORDER BY r.reply_to
    LOOP
        IF v_queue !~ '^[A-Za-z0-9_]{1,47}$' THEN
            RAISE EXCEPTION 'invalid reply queue name %', quote_literal(v_queue)
                USING ERRCODE = '22023', DETAIL = v_queue,
                      HINT = 'A queue name has 1 to 47 letters, digits or underscores.';
        END IF;
        IF EXISTS (
            SELECT 1
              FROM unnest(p_reply_tos, p_replies) AS r(reply_to, reply)
             WHERE r.reply_to = v_queue AND r.reply IS NULL) THEN
            RAISE EXCEPTION 'missing reply for reply queue %', quote_literal(v_queue)
                USING ERRCODE = '22023', DETAIL = v_queue;
        END IF;
        IF NOT EXISTS (SELECT 1 FROM pgmq.meta m WHERE m.queue_name = v_queue) THEN
            PERFORM pgmq."create"(v_queue);
        END IF;
        PERFORM pgmq.send_batch(
            v_queue,
            ARRAY(SELECT r.reply
                    FROM unnest(p_reply_tos, p_replies) WITH ORDINALITY
                         AS r(reply_to, reply, ord)
                   WHERE r.reply_to = v_queue
                   ORDER BY r.ord),
            0);
        -- NOTIFY folds unquoted channel names to lower case; so do we.
        PERFORM pg_notify(lower('pgmq_notify_' || v_queue), '');
    END LOOP;

    -- 6. batch counters
    IF v_ids IS NULL THEN
        RETURN;
    END IF;
    SELECT array_agg(d.batch_id ORDER BY d.batch_id),
           array_agg(d.done ORDER BY d.batch_id),
           array_agg(d.failed ORDER BY d.batch_id),
           array_agg(d.tsq ORDER BY d.batch_id)
      INTO v_d_batch, v_d_done, v_d_failed, v_d_tsq
      FROM (SELECT o.batch_id,
                   count(*) FILTER (
                       WHERE p_status = 'COMPLETED'
                         AND o.status IN ('IN_PROGRESS', 'IN_TROUBLESHOOTING_QUEUE'))::int
                       AS done,
                   count(*) FILTER (
                       WHERE p_status = 'FAILED' AND o.status = 'IN_PROGRESS')::int
                       AS failed,
                   (count(*) FILTER (
                        WHERE p_status = 'IN_TROUBLESHOOTING_QUEUE'
                          AND o.status = 'IN_PROGRESS')
                    - count(*) FILTER (
                        WHERE p_status = 'COMPLETED'
                          AND o.status = 'IN_TROUBLESHOOTING_QUEUE'))::int
                       AS tsq,
                   count(*) FILTER (
                       WHERE (p_status = 'COMPLETED'
                              AND o.status IN ('IN_PROGRESS', 'IN_TROUBLESHOOTING_QUEUE'))
                          OR (p_status IN ('FAILED', 'IN_TROUBLESHOOTING_QUEUE')
                              AND o.status = 'IN_PROGRESS'))
                       AS transitions
              FROM unnest(v_ids, v_old, v_batches) AS o(command_id, status, batch_id)
             WHERE o.batch_id IS NOT NULL
             GROUP BY o.batch_id) d
     WHERE d.transitions > 0;

    IF v_d_batch IS NULL THEN
        RETURN;
    END IF;
    RETURN QUERY
    SELECT a.batch_id, a.batch_complete
      FROM commandbus.cmdbus_apply_batch_deltas(
               p_domain, v_d_batch, v_d_done, v_d_failed,
               array_fill(0, ARRAY[cardinality(v_d_batch)]), v_d_tsq) a;
END;
$$;

-- -- cmdbus_receive ----------------------------------------------------------

-- Reads up to p_qty messages (pgmq.read, visibility p_vt seconds) and claims
-- their commands. One row per message, ascending msg_id, with outcome:
-- - 'INVALID': the message is not a JSON object, or its command_id is
--   missing, not a string or not a UUID (checked with a regex mirroring
--   PostgreSQL's uuid input, so no cast can fail). Archived; no audit (there
--   is no command id). All command columns NULL.
-- - 'SKIPPED' (the receive guard): archived, audit RECEIVE_SKIPPED
--   (command_id = the message's id) {msg_id, reason, status}, reason
--     'UNKNOWN_COMMAND'   no command (p_domain, command_id); status null;
--     'TERMINAL_STATUS'   the command is COMPLETED, CANCELED, FAILED or
--                         IN_TROUBLESHOOTING_QUEUE; status = that status;
--     'DUPLICATE_MESSAGE' a message with a lower msg_id in this same read
--                         carries the same command_id; only that lowest one
--                         is processed; status = the command's status after
--                         this call (null if unknown).
--   Columns: command_id and status (as in the details); the rest NULL.
-- - 'OK': sp_receive_command semantics: attempts + 1, status IN_PROGRESS,
--   updated_at; audit RECEIVED {msg_id (of this message), attempt,
--   max_attempts}; each PENDING batch of these commands goes to IN_PROGRESS
--   with started_at and one BATCH_STARTED {batch_id} (once per batch).
--   Columns: the post-update row; reply_to is NULL when reply_queue = ''.
-- Command rows are locked in command_id order, batch rows in batch_id order.
CREATE FUNCTION commandbus.cmdbus_receive(
    p_domain     TEXT,
    p_queue_name TEXT,
    p_vt         INT,
    p_qty        INT
) RETURNS TABLE(
    msg_id         BIGINT,
    read_ct        INT,
    message        JSONB,
    outcome        TEXT,
    command_id     UUID,
    command_type   TEXT,
    status         TEXT,
    attempts       INT,
    max_attempts   INT,
    correlation_id UUID,
    reply_to       TEXT,
    batch_id       UUID
)
LANGUAGE plpgsql
AS $$
DECLARE
    v_n          INT;
    v_msg_ids    BIGINT[];
    v_read_cts   INT[];
    v_messages   JSONB[];
    v_cids       UUID[];
    v_ok         INT;
    v_ok_types   TEXT[];
    v_ok_att     INT[];
    v_ok_max     INT[];
    v_ok_corr    UUID[];
    v_ok_reply   TEXT[];
    v_ok_batch   UUID[];
    v_batches    UUID[];
    v_outcomes   TEXT[];
    v_reasons    TEXT[];
    v_statuses   TEXT[];
    v_tids       TID[];
    v_tid_msgs   BIGINT[];
    v_btids      TID[];
BEGIN
    -- The subquery fixes the msg_id order of every array.
    SELECT array_agg(r.msg_id), array_agg(r.read_ct), array_agg(r.message),
           array_agg(r.cid), count(*)
      INTO v_msg_ids, v_read_cts, v_messages, v_cids, v_n
      FROM (SELECT m.msg_id, m.read_ct, m.message,
                   CASE
                       WHEN jsonb_typeof(m.message) = 'object'
                        AND jsonb_typeof(m.message -> 'command_id') = 'string'
                        AND (m.message ->> 'command_id') ~*
                            '^(\{[0-9a-f]{4}(-?[0-9a-f]{4}){7}\}|[0-9a-f]{4}(-?[0-9a-f]{4}){7})$'
                       THEN (m.message ->> 'command_id')::uuid
                   END AS cid
              FROM pgmq.read(p_queue_name, p_vt, p_qty) AS m
             ORDER BY m.msg_id) r;

    IF v_n = 0 THEN
        RETURN;
    END IF;

    -- Claim: lock in command_id order (one index probe per id, see "Plans"
    -- at the top), keeping for each non-terminal command its ctid and its
    -- lowest msg_id; then update those rows by ctid (each once) and audit
    -- RECEIVED in msg_id order.
    SELECT array_agg(l.tid), array_agg(l.msg_id)
      INTO v_tids, v_tid_msgs
      FROM (SELECT f.msg_id, c.tid, c.status
              FROM (SELECT DISTINCT ON (t.cid) t.cid, t.msg_id
                      FROM unnest(v_msg_ids, v_cids) AS t(msg_id, cid)
                     WHERE t.cid IS NOT NULL
                     ORDER BY t.cid, t.msg_id) f
             CROSS JOIN LATERAL (
                   SELECT c.ctid AS tid, c.status
                     FROM commandbus.command c
                    WHERE c.domain = p_domain
                      AND c.command_id = f.cid
                    LIMIT 1
                      FOR UPDATE) c) l
     WHERE l.status NOT IN ('COMPLETED', 'CANCELED', 'FAILED',
                            'IN_TROUBLESHOOTING_QUEUE');

    WITH u AS (
        UPDATE commandbus.command c
           SET attempts = c.attempts + 1,
               status = 'IN_PROGRESS',
               updated_at = NOW()
          FROM unnest(v_tids, v_tid_msgs) AS f(tid, msg_id)
         WHERE c.ctid = f.tid
        RETURNING f.msg_id, c.command_id, c.command_type, c.attempts,
                  c.max_attempts, c.correlation_id, c.reply_queue, c.batch_id
    ), a AS (
        INSERT INTO commandbus.audit (ts, domain, command_id, event_type, details_json)
        SELECT clock_timestamp(), p_domain, u.command_id, 'RECEIVED',
               jsonb_build_object('msg_id', u.msg_id,
                                  'attempt', u.attempts,
                                  'max_attempts', u.max_attempts)
          FROM u
         ORDER BY u.msg_id
    )
    SELECT count(*),
           array_agg(o.command_type), array_agg(o.attempts),
           array_agg(o.max_attempts), array_agg(o.correlation_id),
           array_agg(NULLIF(o.reply_queue, '')), array_agg(o.batch_id),
           array_agg(DISTINCT o.batch_id) FILTER (WHERE o.batch_id IS NOT NULL)
      INTO v_ok, v_ok_types, v_ok_att, v_ok_max, v_ok_corr, v_ok_reply,
           v_ok_batch, v_batches
      FROM (SELECT u.* FROM u ORDER BY u.msg_id) o;

    -- sp_start_batch, once per PENDING batch.
    -- The PENDING ones are locked in batch_id order with one primary-key
    -- probe per id (see "Plans" at the top; `|| ''` keeps ix_batch_status
    -- out of reach), then updated by ctid (no other condition on the table:
    -- the locked rows are PENDING).
    IF v_batches IS NOT NULL THEN
        v_btids := ARRAY(
            SELECT b.tid
              FROM (SELECT DISTINCT p_domain AS domain, x.batch_id
                      FROM unnest(v_batches) AS x(batch_id)
                     ORDER BY x.batch_id) x
             CROSS JOIN LATERAL (
                   SELECT b.ctid AS tid
                     FROM commandbus.batch b
                    WHERE b.domain = x.domain
                      AND b.batch_id = x.batch_id
                      AND b.status || '' = 'PENDING'
                    ORDER BY b.batch_id
                    LIMIT 1
                      FOR UPDATE) b);

        IF cardinality(v_btids) > 0 THEN
            WITH s AS (
                UPDATE commandbus.batch b
                   SET status = 'IN_PROGRESS',
                       started_at = NOW()
                 WHERE b.ctid = ANY(v_btids)
                RETURNING b.batch_id
            )
            INSERT INTO commandbus.audit (ts, domain, command_id, event_type, details_json)
            SELECT clock_timestamp(), p_domain, s.batch_id, 'BATCH_STARTED',
                   jsonb_build_object('batch_id', s.batch_id)
              FROM s
             ORDER BY s.batch_id;
        END IF;
    END IF;

    -- Fast path: every message claimed its own command; the arrays of the
    -- claimed rows are in msg_id order like the messages.
    IF v_ok = v_n THEN
        RETURN QUERY
        SELECT t.msg_id, t.read_ct, t.message, 'OK'::text, t.cid,
               t.command_type, 'IN_PROGRESS'::text, t.attempts,
               t.max_attempts, t.correlation_id, t.reply_to, t.batch_id
          FROM unnest(v_msg_ids, v_read_cts, v_messages, v_cids, v_ok_types,
                      v_ok_att, v_ok_max, v_ok_corr, v_ok_reply, v_ok_batch)
               AS t(msg_id, read_ct, message, cid, command_type, attempts,
                    max_attempts, correlation_id, reply_to, batch_id);
        RETURN;
    END IF;

    -- Otherwise classify every message against the rows as they are now
    -- (locked; the claimed ones are IN_PROGRESS).
    SELECT array_agg(k.outcome ORDER BY k.msg_id),
           array_agg(k.reason ORDER BY k.msg_id),
           array_agg(k.status ORDER BY k.msg_id)
      INTO v_outcomes, v_reasons, v_statuses
      FROM (SELECT t.msg_id,
                   c.status,
                   CASE
                       WHEN t.cid IS NULL THEN 'INVALID'
                       WHEN t.rn > 1 OR c.command_id IS NULL
                            OR c.status IN ('COMPLETED', 'CANCELED', 'FAILED',
                                            'IN_TROUBLESHOOTING_QUEUE')
                           THEN 'SKIPPED'
                       ELSE 'OK'
                   END AS outcome,
                   CASE
                       WHEN t.cid IS NULL THEN NULL
                       WHEN t.rn > 1 THEN 'DUPLICATE_MESSAGE'
                       WHEN c.command_id IS NULL THEN 'UNKNOWN_COMMAND'
                       WHEN c.status IN ('COMPLETED', 'CANCELED', 'FAILED',
                                         'IN_TROUBLESHOOTING_QUEUE')
                           THEN 'TERMINAL_STATUS'
                   END AS reason
              FROM (SELECT x.msg_id, x.cid,
                           row_number() OVER (PARTITION BY x.cid
                                              ORDER BY x.msg_id) AS rn
                      FROM unnest(v_msg_ids, v_cids) AS x(msg_id, cid)) t
              LEFT JOIN LATERAL (
                   SELECT c.command_id, c.status
                     FROM commandbus.command c
                    WHERE c.domain = p_domain
                      AND c.command_id = t.cid
                    LIMIT 1) c ON TRUE) k;

    IF 'SKIPPED' = ANY(v_outcomes) THEN
        INSERT INTO commandbus.audit (ts, domain, command_id, event_type, details_json)
        SELECT clock_timestamp(), p_domain, t.cid, 'RECEIVE_SKIPPED',
               jsonb_build_object('msg_id', t.msg_id,
                                  'reason', t.reason,
                                  'status', t.status)
          FROM unnest(v_msg_ids, v_cids, v_outcomes, v_reasons, v_statuses)
               AS t(msg_id, cid, outcome, reason, status)
         WHERE t.outcome = 'SKIPPED'
         ORDER BY t.msg_id;
    END IF;

    PERFORM pgmq.archive(
        p_queue_name,
        ARRAY(SELECT t.msg_id
                FROM unnest(v_msg_ids, v_outcomes) AS t(msg_id, outcome)
               WHERE t.outcome <> 'OK'
               ORDER BY t.msg_id));

    RETURN QUERY
    SELECT t.msg_id, t.read_ct, t.message, t.outcome,
           CASE WHEN t.outcome <> 'INVALID' THEN t.cid END,
           c.command_type,
           CASE WHEN t.outcome = 'OK' THEN c.status ELSE t.status END,
           c.attempts,
           c.max_attempts,
           c.correlation_id,
           NULLIF(c.reply_queue, ''),
           c.batch_id
      FROM unnest(v_msg_ids, v_read_cts, v_messages, v_cids, v_outcomes,
                  v_statuses)
           AS t(msg_id, read_ct, message, cid, outcome, status)
      LEFT JOIN LATERAL (
           SELECT c.command_type, c.status, c.attempts, c.max_attempts,
                  c.correlation_id, c.reply_queue, c.batch_id
             FROM commandbus.command c
            WHERE t.outcome = 'OK'
              AND c.domain = p_domain
              AND c.command_id = t.cid
            LIMIT 1) c ON TRUE
     ORDER BY t.msg_id;
END;
$$;

-- -- cmdbus_complete ---------------------------------------------------------

-- The success path of many commands (the reference worker's `complete`):
-- pgmq.delete of the
-- messages; status COMPLETED for the commands whose status really changes;
-- audit COMPLETED {msg_id, reply_to, has_result} for every element (also
-- idempotent re-completes and unknown commands, as sp_finish_command);
-- p_replies[i] (the SUCCESS reply JSON built by the caller) sent to
-- p_reply_tos[i] when that is not NULL (queue created if missing, one
-- send_batch and one NOTIFY per queue); batch counters: complete
-- (from IN_PROGRESS) and tsq_complete (from IN_TROUBLESHOOTING_QUEUE).
-- Returns the batches with a counted transition and whether each just became
-- terminal (the caller runs batch callbacks after commit).
CREATE FUNCTION commandbus.cmdbus_complete(
    p_domain      TEXT,
    p_queue_name  TEXT,
    p_msg_ids     BIGINT[],
    p_command_ids UUID[],
    p_has_result  BOOLEAN[],
    p_reply_tos   TEXT[],
    p_replies     JSONB[]
) RETURNS TABLE(batch_id UUID, batch_complete BOOLEAN)
LANGUAGE plpgsql
AS $$
DECLARE
    v_n       INT := COALESCE(cardinality(p_msg_ids), 0);
    v_details JSONB[];
BEGIN
    PERFORM commandbus.cmdbus_check_lengths(
        'cmdbus_complete', v_n,
        ARRAY['p_command_ids', 'p_has_result', 'p_reply_tos', 'p_replies'],
        ARRAY[COALESCE(cardinality(p_command_ids), 0), cardinality(p_has_result),
              cardinality(p_reply_tos), cardinality(p_replies)]);
    IF v_n = 0 THEN
        RETURN;
    END IF;
    IF array_position(p_command_ids, NULL) IS NOT NULL THEN
        RAISE EXCEPTION 'cmdbus_complete: p_command_ids contains NULL'
            USING ERRCODE = '22023';
    END IF;

    v_details := ARRAY(
        SELECT jsonb_build_object('msg_id', t.msg_id,
                                  'reply_to', NULLIF(t.reply_to, ''),
                                  'has_result', COALESCE(t.has_result, FALSE))
          FROM unnest(p_msg_ids, p_has_result, p_reply_tos) WITH ORDINALITY
               AS t(msg_id, has_result, reply_to, ord)
         ORDER BY t.ord);

    RETURN QUERY
    SELECT f.batch_id, f.batch_complete
      FROM commandbus.cmdbus_finish_commands(
               p_domain, p_queue_name, 'delete', 'COMPLETED', 'COMPLETED',
               p_msg_ids, p_command_ids, NULL, NULL, NULL, v_details,
               p_reply_tos, p_replies) f;
END;
$$;

-- -- cmdbus_fail_final -------------------------------------------------------

-- The final failure paths of many commands, all of one p_kind:
--   'PERMANENT'     -> IN_TROUBLESHOOTING_QUEUE, last_error_type PERMANENT,
--                      audit MOVED_TO_TSQ {msg_id, attempt, error_code,
--                      error_msg, error_details}; no reply.
--   'EXHAUSTED'     -> IN_TROUBLESHOOTING_QUEUE, last_error_type
--                      p_error_types[i] (default TRANSIENT), audit
--                      MOVED_TO_TSQ {msg_id, attempt, max_attempts,
--                      reason: 'EXHAUSTED', error_type, error_code,
--                      error_msg}; no reply.
--   'BUSINESS_RULE' -> FAILED, last_error_type BUSINESS_RULE, audit
--                      BUSINESS_RULE_FAILED {msg_id, attempt, error_code,
--                      error_msg, error_details}; p_replies[i] (the FAILED
--                      reply built by the caller) sent to p_reply_tos[i]
--                      as in cmdbus_complete.
-- For PERMANENT and BUSINESS_RULE p_error_types is ignored; for PERMANENT and
-- EXHAUSTED p_reply_tos/p_replies are ignored. error_details NULL is
-- recorded as {} (the reference's default). The messages are archived; the
-- status and last_error_* (COALESCE(new, old)) change only where the status
-- really changes; every element gets its audit row. Batch counters:
-- tsq_move (IN_PROGRESS -> IN_TROUBLESHOOTING_QUEUE), failed (IN_PROGRESS ->
-- FAILED). Returns the batches with a counted transition and whether each
-- just became terminal. An unknown p_kind raises 22023.
CREATE FUNCTION commandbus.cmdbus_fail_final(
    p_domain        TEXT,
    p_queue_name    TEXT,
    p_kind          TEXT,
    p_msg_ids       BIGINT[],
    p_command_ids   UUID[],
    p_attempts      INT[],
    p_max_attempts  INT[],
    p_error_types   TEXT[],
    p_error_codes   TEXT[],
    p_error_msgs    TEXT[],
    p_error_details JSONB[],
    p_reply_tos     TEXT[],
    p_replies       JSONB[]
) RETURNS TABLE(batch_id UUID, batch_complete BOOLEAN)
LANGUAGE plpgsql
AS $$
DECLARE
    v_n           INT := COALESCE(cardinality(p_msg_ids), 0);
    v_status      TEXT;
    v_event       TEXT;
    v_error_types TEXT[];
    v_details     JSONB[];
BEGIN
    IF p_kind IS NULL OR p_kind NOT IN ('PERMANENT', 'EXHAUSTED', 'BUSINESS_RULE') THEN
        RAISE EXCEPTION 'cmdbus_fail_final: unknown kind %', quote_nullable(p_kind)
            USING ERRCODE = '22023',
                  HINT = 'Expected PERMANENT, EXHAUSTED or BUSINESS_RULE.';
    END IF;
    PERFORM commandbus.cmdbus_check_lengths(
        'cmdbus_fail_final', v_n,
        ARRAY['p_command_ids', 'p_attempts', 'p_max_attempts', 'p_error_types',
              'p_error_codes', 'p_error_msgs', 'p_error_details', 'p_reply_tos',
              'p_replies'],
        ARRAY[COALESCE(cardinality(p_command_ids), 0), cardinality(p_attempts),
              cardinality(p_max_attempts), cardinality(p_error_types),
              cardinality(p_error_codes), cardinality(p_error_msgs),
              cardinality(p_error_details), cardinality(p_reply_tos),
              cardinality(p_replies)]);
    IF v_n = 0 THEN
        RETURN;
    END IF;
    IF array_position(p_command_ids, NULL) IS NOT NULL THEN
        RAISE EXCEPTION 'cmdbus_fail_final: p_command_ids contains NULL'
            USING ERRCODE = '22023';
    END IF;

    IF p_kind = 'BUSINESS_RULE' THEN
        v_status := 'FAILED';
        v_event := 'BUSINESS_RULE_FAILED';
    ELSE
        v_status := 'IN_TROUBLESHOOTING_QUEUE';
        v_event := 'MOVED_TO_TSQ';
    END IF;

    SELECT array_agg(CASE p_kind
                         WHEN 'EXHAUSTED' THEN COALESCE(t.error_type, 'TRANSIENT')
                         ELSE p_kind
                     END ORDER BY t.ord),
           array_agg(CASE p_kind
                         WHEN 'EXHAUSTED' THEN
                             jsonb_build_object(
                                 'msg_id', t.msg_id,
                                 'attempt', t.attempt,
                                 'max_attempts', t.max_attempts,
                                 'reason', 'EXHAUSTED',
                                 'error_type', COALESCE(t.error_type, 'TRANSIENT'),
                                 'error_code', t.error_code,
                                 'error_msg', t.error_msg)
                         ELSE
                             jsonb_build_object(
                                 'msg_id', t.msg_id,
                                 'attempt', t.attempt,
                                 'error_code', t.error_code,
                                 'error_msg', t.error_msg,
                                 'error_details', COALESCE(t.error_details, '{}'::jsonb))
                     END ORDER BY t.ord)
      INTO v_error_types, v_details
      FROM unnest(p_msg_ids, p_attempts, p_max_attempts, p_error_types,
                  p_error_codes, p_error_msgs, p_error_details) WITH ORDINALITY
           AS t(msg_id, attempt, max_attempts, error_type, error_code,
                error_msg, error_details, ord);

    RETURN QUERY
    SELECT f.batch_id, f.batch_complete
      FROM commandbus.cmdbus_finish_commands(
               p_domain, p_queue_name, 'archive', v_status, v_event,
               p_msg_ids, p_command_ids, v_error_types, p_error_codes,
               p_error_msgs, v_details,
               CASE WHEN p_kind = 'BUSINESS_RULE' THEN p_reply_tos END,
               CASE WHEN p_kind = 'BUSINESS_RULE' THEN p_replies END) f;
END;
$$;

-- -- cmdbus_fail_transient ---------------------------------------------------

-- Transient failures with a retry pending (sp_fail_command + pgmq.set_vt):
-- each message's vt becomes clock_timestamp() + p_backoff_seconds[i] (NULL
-- counts as 0) with one UPDATE of the queue table; for each known command
-- the status is unchanged, last_error_type = 'TRANSIENT', last_error_code
-- and last_error_msg set, updated_at (a command given twice takes its last
-- occurrence's values, as sequential calls would); audit FAILED {msg_id,
-- attempt, max_attempts, error_type: 'TRANSIENT', error_code, error_msg} for
-- every element whose command exists, in input order. Unknown commands get
-- no audit. Returns the number of command rows updated.
CREATE FUNCTION commandbus.cmdbus_fail_transient(
    p_domain          TEXT,
    p_queue_name      TEXT,
    p_msg_ids         BIGINT[],
    p_command_ids     UUID[],
    p_attempts        INT[],
    p_max_attempts    INT[],
    p_error_codes     TEXT[],
    p_error_msgs      TEXT[],
    p_backoff_seconds INT[]
) RETURNS INT
LANGUAGE plpgsql
AS $$
DECLARE
    v_n     INT := COALESCE(cardinality(p_msg_ids), 0);
    v_count     INT;
    v_tids      TID[];
    v_err_codes TEXT[];
    v_err_msgs  TEXT[];
BEGIN
    PERFORM commandbus.cmdbus_check_lengths(
        'cmdbus_fail_transient', v_n,
        ARRAY['p_command_ids', 'p_attempts', 'p_max_attempts', 'p_error_codes',
              'p_error_msgs', 'p_backoff_seconds'],
        ARRAY[COALESCE(cardinality(p_command_ids), 0), cardinality(p_attempts),
              cardinality(p_max_attempts), cardinality(p_error_codes),
              cardinality(p_error_msgs), cardinality(p_backoff_seconds)]);
    IF v_n = 0 THEN
        RETURN 0;
    END IF;
    IF array_position(p_command_ids, NULL) IS NOT NULL THEN
        RAISE EXCEPTION 'cmdbus_fail_transient: p_command_ids contains NULL'
            USING ERRCODE = '22023';
    END IF;

    -- Queue rows first (lock order). format_table_name rejects dangerous
    -- names; %I quotes the rest. The redundant msg_id = ANY($1) restricts
    -- the queue table to primary-key probes of the given ids whatever the
    -- join method (it is estimated at n rows, msg_id being unique).
    EXECUTE format(
        'UPDATE pgmq.%I q
            SET vt = clock_timestamp() + make_interval(secs => COALESCE(t.backoff, 0))
           FROM unnest($1::bigint[], $2::int[]) AS t(msg_id, backoff)
          WHERE q.msg_id = ANY($1::bigint[])
            AND q.msg_id = t.msg_id',
        pgmq.format_table_name(p_queue_name, 'q'))
    USING p_msg_ids, p_backoff_seconds;

    -- Lock in command_id order (one index probe per id, see "Plans" at the
    -- top), with the error values of each command's last occurrence (as
    -- sequential calls would leave them); then update the locked rows by
    -- ctid.
    SELECT array_agg(l.tid ORDER BY l.command_id),
           array_agg(l.error_code ORDER BY l.command_id),
           array_agg(l.error_msg ORDER BY l.command_id)
      INTO v_tids, v_err_codes, v_err_msgs
      FROM (SELECT x.command_id, c.tid, x.error_code, x.error_msg
              FROM (SELECT DISTINCT ON (t.command_id)
                           t.command_id, t.error_code, t.error_msg
                      FROM unnest(p_command_ids, p_error_codes, p_error_msgs)
                           WITH ORDINALITY AS t(command_id, error_code,
                                                error_msg, ord)
                     ORDER BY t.command_id, t.ord DESC) x
             CROSS JOIN LATERAL (
                   SELECT c.ctid AS tid
                     FROM commandbus.command c
                    WHERE c.domain = p_domain
                      AND c.command_id = x.command_id
                    LIMIT 1
                      FOR UPDATE) c) l;

    WITH t AS (
        SELECT x.*
          FROM unnest(p_msg_ids, p_command_ids, p_attempts, p_max_attempts,
                      p_error_codes, p_error_msgs) WITH ORDINALITY
               AS x(msg_id, command_id, attempt, max_attempts, error_code,
                    error_msg, ord)
    ), u AS (
        UPDATE commandbus.command c
           SET last_error_type = 'TRANSIENT',
               last_error_code = f.error_code,
               last_error_msg = f.error_msg,
               updated_at = NOW()
          FROM unnest(v_tids, v_err_codes, v_err_msgs)
               AS f(tid, error_code, error_msg)
         WHERE c.ctid = f.tid
        RETURNING c.command_id
    ), a AS (
        INSERT INTO commandbus.audit (ts, domain, command_id, event_type, details_json)
        SELECT clock_timestamp(), p_domain, t.command_id, 'FAILED',
               jsonb_build_object('msg_id', t.msg_id,
                                  'attempt', t.attempt,
                                  'max_attempts', t.max_attempts,
                                  'error_type', 'TRANSIENT',
                                  'error_code', t.error_code,
                                  'error_msg', t.error_msg)
          FROM t
         WHERE t.command_id IN (SELECT u.command_id FROM u)
         ORDER BY t.ord
    )
    SELECT count(*)::int INTO v_count FROM u;

    RETURN v_count;
END;
$$;

-- -- cmdbus_extend_visibility ------------------------------------------------

-- Lease heartbeat (docs/design.md, "Visibility extension and lease
-- heartbeat"): vt = clock_timestamp() + p_seconds for the given
-- messages, visible or not, with one UPDATE. Returns how many exist.
CREATE FUNCTION commandbus.cmdbus_extend_visibility(
    p_queue_name TEXT,
    p_msg_ids    BIGINT[],
    p_seconds    INT
) RETURNS INT
LANGUAGE plpgsql
AS $$
DECLARE
    v_count INT;
BEGIN
    IF COALESCE(cardinality(p_msg_ids), 0) = 0 THEN
        RETURN 0;
    END IF;
    IF p_seconds IS NULL THEN
        RAISE EXCEPTION 'cmdbus_extend_visibility: p_seconds is NULL'
            USING ERRCODE = '22023';
    END IF;

    EXECUTE format(
        'UPDATE pgmq.%I q
            SET vt = clock_timestamp() + make_interval(secs => $2)
          WHERE q.msg_id = ANY($1)',
        pgmq.format_table_name(p_queue_name, 'q'))
    USING p_msg_ids, p_seconds;
    GET DIAGNOSTICS v_count = ROW_COUNT;
    RETURN v_count;
END;
$$;
