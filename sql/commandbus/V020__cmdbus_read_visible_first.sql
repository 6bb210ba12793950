-- The priority, cap and shard read (cmdbus_read, V010) takes its
-- oldest-first messages in the order they became visible, as the worker's
-- default read does since V019, and bounds that scan by a cut passed as a
-- value. Same signature, arguments, rows, claim and errors as V010; only
-- which messages count as the oldest and how they are found change.
--
-- Why: V010 chose its oldest-first candidates `WHERE vt <= clock_timestamp()
-- ORDER BY msg_id`. A volatile function cannot bound an index, so the scan
-- walked the queue from its lowest msg_id and filtered every row on vt:
-- each read stepped over the messages it cannot take (held by other reads,
-- delayed until later, waiting for a retry's backoff). With a per-type cap,
-- a shard, or the oldest-first share of a priority read, a read of 10 due
-- messages touched 992 buffers behind 80,000 delayed ones and 8,281 behind
-- 6,000 held ones; it now touches 116 and 157, about what it touches behind
-- a few hundred (tests/db/read_due_test.cpp).
--
-- How: the oldest-first rounds order by vt and take the cut
-- (clock_timestamp() once, at the call) as a parameter, so their scan
-- walks PGMQ's vt index from the message visible the longest and stops at
-- the cut: a message that is not visible is never visited.
-- The priority rounds are V010's, cut included: clock_timestamp(), which
-- the planner cannot see, so their plan always walks the priority index
-- (docs/scheduling.md) and steps over the held and delayed messages that
-- come before the due ones in that order. Given the cut as a value, the
-- planner would choose between that walk and sorting every due message by
-- the statistics' guess of how many are due; a guess made before a burst
-- of new messages would sort the whole visible backlog on every read.
--
-- Order: "oldest" now means visible the longest, as in V019. A command
-- sent without a delay is visible from its send, so a backlog is taken in
-- send order as before; a delayed command, a retry after its backoff and a
-- message whose lease ran out queue up when they become visible. Messages
-- with the same vt (one batch send) come in no promised order. The
-- starvation bound of docs/scheduling.md holds with "older" read as
-- "visible longer": a message that becomes visible later never goes ahead.

-- -- cmdbus_read --------------------------------------------------------------

CREATE OR REPLACE FUNCTION commandbus.cmdbus_read(
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
    v_now      TIMESTAMPTZ := clock_timestamp();
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
              WHERE q.vt <= %s
                AND q.msg_id <> ALL ($1)
                AND COALESCE(q.message ->> ''command_type'', '''') <> ALL ($2)
                %s
              ORDER BY %s
              LIMIT $3
                FOR UPDATE SKIP LOCKED',
            v_table,
            CASE WHEN v_fifo THEN '$6' ELSE 'clock_timestamp()' END,
            CASE WHEN v_shard THEN 'AND q.msg_id % $4 = $5' ELSE '' END,
            CASE WHEN v_fifo THEN 'q.vt'
                 ELSE 'CASE WHEN jsonb_typeof(q.message -> ''priority'') = ''number''
                            THEN (q.message ->> ''priority'')::numeric
                            ELSE 0 END DESC, q.msg_id' END);
        v_cut := FALSE;
        FOR v_row IN EXECUTE v_sql
            USING v_taken, v_excluded, v_want, p_shard_count::bigint,
                  p_shard_index::bigint, v_now
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
