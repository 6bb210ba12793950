-- One read that chooses WHICH visible messages of a command queue to take:
-- by priority, within per-type limits, from one shard. Added beside the
-- reference's objects and PGMQ's (nothing of them changes; the queue tables
-- keep PGMQ's columns and indexes).
--
--   cmdbus_read          claims like pgmq.read (FOR UPDATE SKIP LOCKED,
--                        vt = clock_timestamp() + p_vt, read_ct + 1, rows
--                        of pgmq.message_record) with optional per-type
--                        limits, a shard and the priority order
--   cmdbus_claim_read    the claim of read messages (cmdbus_receive_claim's
--                        body after its read, unchanged), shared by:
--   cmdbus_receive_claim same signature, rows and writes as in V007; now
--                        pgmq.read + cmdbus_claim_read
--   cmdbus_receive_read  cmdbus_read + cmdbus_claim_read: what a worker
--                        calls for a domain with priorities, per-type caps
--                        or a shard (docs/scheduling.md)
--
-- Priority: an optional member "priority" of the message (an integer set by
-- the sender; absent for a command sent without one, whose message is then
-- byte for byte what it was before). A member that is not a JSON number
-- counts as 0, as an absent one does; so no message can make the read fail.
-- The reference worker reads with pgmq.read and never looks at it.
--
-- Starvation bound: a read with the priority order takes its first
-- p_oldest messages oldest-first (msg_id order, whatever their priority),
-- the rest highest priority first (msg_id order among equals). The worker
-- asks for one oldest-first message per `fifo_every` messages it claims
-- (docs/scheduling.md, "Priorities"), so a visible message with n visible
-- messages older than it is claimed within fifo_every * (n + 1) claims of
-- any one worker, however many higher-priority messages keep arriving.

-- -- cmdbus_read --------------------------------------------------------------

-- Claims up to p_qty visible messages (vt <= clock_timestamp()) of
-- p_queue_name, hiding them for p_vt seconds and incrementing their
-- read_ct, like pgmq.read; returns the claimed rows (after the update) in
-- the order they were chosen. Optional arguments (NULL = not used):
-- - p_types / p_limits (parallel arrays): at most p_limits[i] messages whose
--   "command_type" is p_types[i] are claimed; a limit of 0 claims none, so
--   a message of a type at its cap is not touched at all (read_ct and vt
--   stay). Types not listed are limited by p_qty only.
-- - p_shard_index / p_shard_count: only messages with
--   msg_id % p_shard_count = p_shard_index (0 <= index < count).
-- - p_priority: TRUE orders by priority (see the top), FALSE (or NULL) by
--   msg_id like pgmq.read.
-- - p_oldest: with p_priority, how many of the p_qty are taken
--   oldest-first before the priority order (0 when NULL).
-- Rows locked by other transactions are skipped, never waited for. When a
-- per-type limit cuts a candidate set, the messages beyond the limit stay
-- locked (not updated) until this statement's transaction ends and the read
-- goes on without their type; at most one extra round per limited type.
-- Raises 22023 for arrays of different lengths, NULL or negative limits, a
-- negative p_qty or p_oldest, and a shard outside 0 <= index < count.
CREATE FUNCTION commandbus.cmdbus_read(
    p_queue_name  TEXT,
    p_vt          INTEGER,
    p_qty         INTEGER,
    p_types       TEXT[] DEFAULT NULL,
    p_limits      INTEGER[] DEFAULT NULL,
    p_shard_index INTEGER DEFAULT NULL,
    p_shard_count INTEGER DEFAULT NULL,
    p_priority    BOOLEAN DEFAULT FALSE,
    p_oldest      INTEGER DEFAULT 0
) RETURNS SETOF pgmq.message_record
LANGUAGE plpgsql
AS $fn$
DECLARE
    v_table    TEXT := pgmq.format_table_name(p_queue_name, 'q');
    v_left     INT := COALESCE(p_qty, 0);
    v_oldest   INT := CASE WHEN COALESCE(p_priority, FALSE)
                           THEN LEAST(COALESCE(p_oldest, 0), COALESCE(p_qty, 0))
                           ELSE 0 END;
    v_types    TEXT[] := COALESCE(p_types, '{}'::TEXT[]);
    v_limits   INT[] := COALESCE(p_limits, '{}'::INT[]);
    v_shard    BOOLEAN := p_shard_count IS NOT NULL OR p_shard_index IS NOT NULL;
    v_taken    BIGINT[] := '{}';
    v_order    BIGINT[] := '{}';
    v_excluded TEXT[];
    v_cut      BOOLEAN;
    v_fifo     BOOLEAN;
    v_want     INT;
    v_sql      TEXT;
    v_row      RECORD;
    v_i        INT;
BEGIN
    IF cardinality(v_types) <> cardinality(v_limits) THEN
        RAISE EXCEPTION 'cmdbus_read: p_types has % elements, p_limits %',
            cardinality(v_types), cardinality(v_limits)
            USING ERRCODE = '22023';
    END IF;
    IF array_position(v_limits, NULL) IS NOT NULL
       OR EXISTS (SELECT 1 FROM unnest(v_limits) l WHERE l < 0) THEN
        RAISE EXCEPTION 'cmdbus_read: per-type limits must be >= 0'
            USING ERRCODE = '22023';
    END IF;
    IF v_left < 0 OR COALESCE(p_oldest, 0) < 0 THEN
        RAISE EXCEPTION 'cmdbus_read: p_qty (%) and p_oldest (%) must be >= 0',
            p_qty, p_oldest USING ERRCODE = '22023';
    END IF;
    IF v_shard AND (p_shard_count IS NULL OR p_shard_index IS NULL
                    OR p_shard_count < 1 OR p_shard_index < 0
                    OR p_shard_index >= p_shard_count) THEN
        RAISE EXCEPTION 'cmdbus_read: shard % of % is not 0 <= index < count',
            quote_nullable(p_shard_index), quote_nullable(p_shard_count)
            USING ERRCODE = '22023';
    END IF;

    -- Rounds: each takes candidates in the wanted order (skipping locked
    -- rows and the types already at their limit), accepts them in that
    -- order while their type has room, and ends the read unless a limit cut
    -- it (then the next round runs without that type). The first rounds
    -- take the oldest-first share, the later ones the priority order.
    v_fifo := v_oldest > 0 OR NOT COALESCE(p_priority, FALSE);
    LOOP
        EXIT WHEN v_left <= 0;
        v_want := CASE WHEN v_fifo AND COALESCE(p_priority, FALSE)
                       THEN LEAST(v_oldest, v_left) ELSE v_left END;
        v_excluded := ARRAY(SELECT t FROM unnest(v_types, v_limits) AS x(t, l)
                             WHERE x.l <= 0);
        v_sql := format(
            'SELECT q.msg_id,
                    COALESCE(q.message ->> ''command_type'', '''') AS type
               FROM pgmq.%I q
              WHERE q.vt <= clock_timestamp()
                AND q.msg_id <> ALL ($1)
                AND COALESCE(q.message ->> ''command_type'', '''') <> ALL ($2)
                %s
              ORDER BY %s
              LIMIT $3
                FOR UPDATE SKIP LOCKED',
            v_table,
            CASE WHEN v_shard THEN 'AND q.msg_id % $4 = $5' ELSE '' END,
            CASE WHEN v_fifo THEN 'q.msg_id'
                 ELSE 'CASE WHEN jsonb_typeof(q.message -> ''priority'') = ''number''
                            THEN (q.message ->> ''priority'')::numeric
                            ELSE 0 END DESC, q.msg_id' END);
        v_cut := FALSE;
        FOR v_row IN EXECUTE v_sql
            USING v_taken, v_excluded, v_want, p_shard_count::bigint,
                  p_shard_index::bigint
        LOOP
            v_i := array_position(v_types, v_row.type);
            IF v_i IS NOT NULL THEN
                IF v_limits[v_i] <= 0 THEN
                    -- Over this type's limit: left as it is (locked until
                    -- our transaction ends).
                    v_cut := TRUE;
                    CONTINUE;
                END IF;
                v_limits[v_i] := v_limits[v_i] - 1;
            END IF;
            v_taken := v_taken || v_row.msg_id;
            v_left := v_left - 1;
            IF v_fifo AND COALESCE(p_priority, FALSE) THEN
                v_oldest := v_oldest - 1;
            END IF;
        END LOOP;
        IF v_fifo AND COALESCE(p_priority, FALSE) AND (v_oldest <= 0 OR NOT v_cut) THEN
            -- The oldest-first share is taken (or nothing older is left):
            -- the rest by priority.
            v_fifo := FALSE;
            CONTINUE;
        END IF;
        EXIT WHEN NOT v_cut;
    END LOOP;

    IF cardinality(v_taken) = 0 THEN
        RETURN;
    END IF;
    RETURN QUERY EXECUTE format(
        'WITH claimed AS (
           UPDATE pgmq.%I m
              SET vt = clock_timestamp() + make_interval(secs => $2),
                  read_ct = m.read_ct + 1
            WHERE m.msg_id = ANY ($1)
           RETURNING m.msg_id, m.read_ct, m.enqueued_at, m.vt, m.message,
                     m.headers
         )
         SELECT c.msg_id, c.read_ct, c.enqueued_at, c.vt, c.message, c.headers
           FROM claimed c
           JOIN unnest($1) WITH ORDINALITY AS o(msg_id, ord)
             ON o.msg_id = c.msg_id
          ORDER BY o.ord',
        v_table)
    USING v_taken, COALESCE(p_vt, 0);
END;
$fn$;

-- -- cmdbus_claim_read ---------------------------------------------------------

-- Claims the commands of messages already read from p_queue_name (the rows
-- of pgmq.read or cmdbus_read, in any order): cmdbus_receive_claim's claim
-- with its rows, writes and outcomes (V004, V007), one row per message in
-- msg_id order. A helper of cmdbus_receive_claim and cmdbus_receive_read.
CREATE FUNCTION commandbus.cmdbus_claim_read(
    p_domain     TEXT,
    p_queue_name TEXT,
    p_claim      UUID,
    p_read       pgmq.message_record[]
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
    -- The claim's mark in every RECEIVED row (none without a token).
    v_claim      JSONB := CASE WHEN p_claim IS NULL THEN '{}'::jsonb
                               ELSE jsonb_build_object('claim', p_claim) END;
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
              FROM unnest(p_read) AS m
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
               || v_claim
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

-- -- cmdbus_receive_claim ------------------------------------------------------

-- V007's function with the same signature, rows and writes: pgmq.read, then
-- the claim of what it read.
CREATE OR REPLACE FUNCTION commandbus.cmdbus_receive_claim(
    p_domain     TEXT,
    p_queue_name TEXT,
    p_vt         INT,
    p_qty        INT,
    p_claim      UUID
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
BEGIN
    RETURN QUERY
    SELECT r.*
      FROM commandbus.cmdbus_claim_read(
               p_domain, p_queue_name, p_claim,
               ARRAY(SELECT m FROM pgmq.read(p_queue_name, p_vt, p_qty) AS m))
           AS r;
END;
$$;

-- -- cmdbus_receive_read -------------------------------------------------------

-- cmdbus_receive_claim reading with cmdbus_read's options (NULL = not used;
-- see cmdbus_read): per-type limits, a shard, the priority order and its
-- oldest-first share. Rows in msg_id order, as cmdbus_receive_claim's.
CREATE FUNCTION commandbus.cmdbus_receive_read(
    p_domain      TEXT,
    p_queue_name  TEXT,
    p_vt          INT,
    p_qty         INT,
    p_claim       UUID,
    p_types       TEXT[],
    p_limits      INT[],
    p_shard_index INT,
    p_shard_count INT,
    p_priority    BOOLEAN,
    p_oldest      INT
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
BEGIN
    RETURN QUERY
    SELECT r.*
      FROM commandbus.cmdbus_claim_read(
               p_domain, p_queue_name, p_claim,
               ARRAY(SELECT m
                       FROM commandbus.cmdbus_read(
                                p_queue_name, p_vt, p_qty, p_types, p_limits,
                                p_shard_index, p_shard_count, p_priority,
                                p_oldest) AS m))
           AS r;
END;
$$;

-- -- cmdbus_create_priority_index ---------------------------------------------

-- Creates (if missing) the index that serves cmdbus_read's priority order on
-- p_queue_name's table, beside PGMQ's own indexes: (the priority as
-- cmdbus_read computes it DESC, msg_id), named q_<queue>_cmdbus_prio.
-- Without it a read by priority sorts the queue's whole visible backlog
-- (about 300 ms per read at 100 000 messages, 5 ms with it). A worker calls
-- it at start for each domain it reads by priority; every later insert into
-- that queue maintains one more index. Concurrent callers are serialised
-- by PGMQ's queue lock (the one its create functions take); the CREATE
-- INDEX itself blocks sends to the queue while it builds, which is short
-- on a queue without a large backlog. Returns whether it created the
-- index. Raises 22023 for a queue PGMQ does not know.
CREATE FUNCTION commandbus.cmdbus_create_priority_index(p_queue_name TEXT)
RETURNS BOOLEAN
LANGUAGE plpgsql
AS $fn$
DECLARE
    v_table TEXT;
    v_index TEXT;
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pgmq.meta m WHERE m.queue_name = p_queue_name) THEN
        RAISE EXCEPTION 'cmdbus_create_priority_index: no queue %',
            quote_literal(p_queue_name) USING ERRCODE = '22023';
    END IF;
    v_table := pgmq.format_table_name(p_queue_name, 'q');
    v_index := v_table || '_cmdbus_prio';
    PERFORM pg_advisory_xact_lock(hashtext('pgmq.queue_' || p_queue_name));
    IF EXISTS (SELECT 1 FROM pg_indexes i
                WHERE i.schemaname = 'pgmq' AND i.indexname = v_index) THEN
        RETURN FALSE;
    END IF;
    EXECUTE format(
        'CREATE INDEX %I ON pgmq.%I
           ((CASE WHEN jsonb_typeof(message -> ''priority'') = ''number''
                  THEN (message ->> ''priority'')::numeric
                  ELSE 0 END) DESC, msg_id)',
        v_index, v_table);
    RETURN TRUE;
END;
$fn$;
