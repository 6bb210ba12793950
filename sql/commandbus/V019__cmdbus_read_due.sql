-- Reads in the order messages became visible (their vt), so that a read
-- only touches the messages it can take. Added beside PGMQ's objects and
-- V010/V016 (pgmq.read is untouched; a reference worker keeps calling it).
--
-- Why: pgmq.read picks `WHERE vt <= now ORDER BY msg_id`. Its index scan
-- walks the queue from the lowest msg_id and filters on vt, so every read
-- steps over every message that is not visible and sits ahead of the first
-- visible ones: the messages other reads hold (in flight, prefetched: up to
-- a few hundred per worker process), commands delayed until later, retries
-- waiting for their backoff. With four worker processes on one queue each
-- read stepped over about a thousand held messages (some 1,400 buffer
-- accesses for a read of 64, against 5 once the held ones are gone); with
-- 50,000 commands delayed until tomorrow, a read of 64 took 7.5 ms instead
-- of 1.1 (docs/performance.md, "Reads").
--
-- How: cmdbus_read_due walks PGMQ's own vt index instead: `WHERE vt <= cut
-- ORDER BY vt`. A held, delayed or backed-off message has its vt in the
-- future, beyond the cut, and is never visited. The claim is pgmq.read's:
-- FOR UPDATE SKIP LOCKED, vt = clock_timestamp() + p_vt, read_ct + 1, rows
-- of pgmq.message_record in msg_id order.
--
-- Order: the messages visible the longest come first. A command sent
-- without a delay becomes visible when it is sent, so a backlog is still
-- taken oldest first; a delayed command queues up when it becomes due (not
-- ahead of everything sent before that time), and so does a retry after its
-- backoff and a message whose lease ran out. Messages with the same vt come
-- in no promised order.
--
-- The worker's default reads (cmdbus_receive_deferred, cmdbus_receive_claim)
-- now read this way; their signatures, rows and writes stay those of V010
-- and V016.

-- -- cmdbus_read_due -----------------------------------------------------------

-- Claims up to p_qty messages of p_queue_name that are visible now (vt not
-- later than clock_timestamp() at the call), those visible the longest
-- first, hiding them for p_vt seconds and incrementing their read_ct, like
-- pgmq.read; returns the claimed rows (after the update) in msg_id order.
-- Rows locked by other transactions are skipped, never waited for.
-- The cut is passed as a value so that the plan can bound the vt index.
CREATE FUNCTION commandbus.cmdbus_read_due(
    p_queue_name TEXT,
    p_vt         INTEGER,
    p_qty        INTEGER
) RETURNS SETOF pgmq.message_record
LANGUAGE plpgsql
AS $fn$
BEGIN
    IF COALESCE(p_qty, 0) <= 0 THEN
        RETURN;
    END IF;
    RETURN QUERY EXECUTE format(
        'WITH picked AS (
           SELECT q.msg_id
             FROM pgmq.%1$I q
            WHERE q.vt <= $3
            ORDER BY q.vt
            LIMIT $1
              FOR UPDATE SKIP LOCKED
         ), claimed AS (
           UPDATE pgmq.%1$I m
              SET vt = clock_timestamp() + make_interval(secs => $2),
                  read_ct = m.read_ct + 1
             FROM picked
            WHERE m.msg_id = picked.msg_id
           RETURNING m.msg_id, m.read_ct, m.enqueued_at, m.vt, m.message,
                     m.headers
         )
         SELECT c.msg_id, c.read_ct, c.enqueued_at, c.vt, c.message, c.headers
           FROM claimed c
          ORDER BY c.msg_id',
        pgmq.format_table_name(p_queue_name, 'q'))
    USING p_qty, COALESCE(p_vt, 0), clock_timestamp();
END;
$fn$;

-- -- cmdbus_receive_deferred -----------------------------------------------------

-- V016's function with the same signature, rows and writes; it reads with
-- cmdbus_read_due instead of pgmq.read.
CREATE OR REPLACE FUNCTION commandbus.cmdbus_receive_deferred(
    p_domain     TEXT,
    p_queue_name TEXT,
    p_vt         INT,
    p_qty        INT,
    p_claim      UUID
) RETURNS TABLE(
    msg_id         BIGINT,
    read_ct        INT,
    vt_us          BIGINT,
    message        JSONB,
    outcome        TEXT,
    command_id     UUID,
    command_type   TEXT,
    attempts       INT,
    seen_attempts  INT,
    max_attempts   INT,
    batch_id       UUID
)
LANGUAGE sql
AS $$
    SELECT d.*
      FROM commandbus.cmdbus_defer_read(
               p_domain, p_queue_name, p_claim,
               ARRAY(SELECT m FROM commandbus.cmdbus_read_due(
                                     p_queue_name, p_vt, p_qty) m)) d
$$;

-- -- cmdbus_receive_claim ------------------------------------------------------

-- V010's function with the same signature, rows and writes; it reads with
-- cmdbus_read_due instead of pgmq.read.
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
               ARRAY(SELECT m FROM commandbus.cmdbus_read_due(
                                     p_queue_name, p_vt, p_qty) AS m))
           AS r;
END;
$$;
