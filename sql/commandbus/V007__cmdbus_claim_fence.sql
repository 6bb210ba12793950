-- Outcomes fenced by the claim itself: a delivery writes its outcome only
-- while the claim that read its message is the one the database knows.
-- Added beside V004 and V006 (whose functions keep their signatures; V006's
-- stay as they are, cmdbus_receive becomes a form of cmdbus_receive_claim).
--
-- Why V006's fence is not enough: it takes a delivery to own its message
-- while the message is in the queue and the command IN_PROGRESS at the
-- delivery's attempt. A claim the database FORGETS breaks that: after a
-- failover to an asynchronous standby (or a restore to an earlier point),
-- the claims the old primary acknowledged but never shipped are gone with
-- their transactions. The message is visible again with its earlier vt and
-- read_ct, the command is back at its earlier attempts, and the next read
-- claims it again AT THE SAME ATTEMPT, while the delivery of the forgotten
-- claim still runs, or holds its outcome unwritten. Both deliveries then
-- pass V006's check; in one call both were written (two COMPLETED rows, two
-- replies), in separate calls the forgotten delivery could win.
--
-- What a forgotten claim cannot repeat: a token of the read itself. The
-- reader draws a random token (a UUID) per read and cmdbus_receive_claim
-- records it in the RECEIVED audit row of every command it claims (details
-- key "claim"). A lost claim loses its RECEIVED row with its transaction;
-- a new claim carries a new token. Neither read_ct, attempts, xmin nor a
-- sequence value will do (a new primary hands them out again), and the vt
-- of the read would, but lease extensions move it. The token costs no
-- write: the RECEIVED row is written anyway; the fence reads it through
-- ix_audit_cmdid_ts.
--
-- A delivery (msg_id, command_id, attempt, claim) OWNS its message when
--   1. the message is in the queue (locked here, FOR UPDATE, msg_id order:
--      queue rows first in the lock order, as everywhere; readers skip
--      locked rows, so the check holds until commit);
--   2. its command is IN_PROGRESS at the delivery's attempt (every later
--      claim increments attempts);
--   3. a RECEIVED row of the command carries the delivery's claim token
--      (the claim is one the database knows);
--   4. it is the first owning element of its command in the call: one
--      outcome per command per call, even if a delivery is given twice.
-- The outcome of an owning delivery is written; any other is left alone
-- and reported, per element, as
--   'WRITTEN' the delivery's own outcome is already in the database: an
--             earlier attempt of the same write committed although its
--             answer was lost (a broken connection at COMMIT), and the
--             writer wrote it again. For a final outcome: the message is
--             gone, the command final at the delivery's attempt, with the
--             message's msg_id and the claim token known. For a retry: the
--             claim token is known and a FAILED row of the delivery's
--             msg_id and attempt exists (only the claim of that attempt
--             writes it); a retry already written is not written again.
--   'STALE'   the delivery no longer holds its message: read again since,
--             its claim forgotten, or the message gone.
-- and 'OWNED' for the written ones. So a writer counts as its own exactly
-- the outcomes it wrote.
--
-- cmdbus_receive_claim, cmdbus_complete_claimed, cmdbus_fail_final_claimed
-- and cmdbus_fail_transient_claimed are what the worker calls;
-- cmdbus_claim_states and cmdbus_positions are their helpers.

-- -- cmdbus_receive_claim ----------------------------------------------------

-- cmdbus_receive (V004) with a claim token: every RECEIVED row it writes
-- gets the details key "claim": p_claim (none when p_claim is NULL). The
-- same columns, rows and writes as cmdbus_receive otherwise.
CREATE FUNCTION commandbus.cmdbus_receive_claim(
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

-- cmdbus_receive is now cmdbus_receive_claim without a token (same
-- signature, rows and writes as in V004).
CREATE OR REPLACE FUNCTION commandbus.cmdbus_receive(
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
BEGIN
    RETURN QUERY
    SELECT r.msg_id, r.read_ct, r.message, r.outcome, r.command_id,
           r.command_type, r.status, r.attempts, r.max_attempts,
           r.correlation_id, r.reply_to, r.batch_id
      FROM commandbus.cmdbus_receive_claim(p_domain, p_queue_name, p_vt,
                                           p_qty, NULL) r;
END;
$$;

-- -- helpers -----------------------------------------------------------------

-- Returns the indexes (1-based, ascending) where p_values equals p_want.
CREATE FUNCTION commandbus.cmdbus_positions(p_values ANYARRAY,
                                            p_want ANYELEMENT)
RETURNS INT[]
LANGUAGE sql IMMUTABLE STRICT
AS $$
    SELECT ARRAY(SELECT i FROM generate_subscripts(p_values, 1) AS i
                  WHERE p_values[i] = p_want ORDER BY i)
$$;

-- Locks the queue rows of p_msg_ids and returns, per element, 'OWNED',
-- 'WRITTEN' or 'STALE' (see the top of this file) for the delivery
-- (p_msg_ids[i], p_command_ids[i], p_attempts[i], p_claims[i]) and a write
-- of p_step 'FINISH' (a final outcome) or 'RETRY' (a transient failure).
-- A NULL claim never owns anything. Raises 22023 for an unknown p_step,
-- arrays of different lengths or a NULL command id.
CREATE FUNCTION commandbus.cmdbus_claim_states(
    p_domain      TEXT,
    p_queue_name  TEXT,
    p_step        TEXT,
    p_msg_ids     BIGINT[],
    p_command_ids UUID[],
    p_attempts    INT[],
    p_claims      UUID[]
) RETURNS TEXT[]
LANGUAGE plpgsql
-- Every lookup here is an index probe of a few rows: the queue rows by
-- msg_id, the command by (domain, command_id), its audit rows by
-- ix_audit_cmdid_ts. A plan cached while a table was still small (a new
-- database, stale statistics) must never turn one into a scan of a whole
-- table per element (see "Plans" in V004), so sequential scans are off.
SET enable_seqscan = off
AS $$
DECLARE
    v_n      INT := COALESCE(cardinality(p_msg_ids), 0);
    v_locked BIGINT[];
BEGIN
    IF p_step IS NULL OR p_step NOT IN ('FINISH', 'RETRY') THEN
        RAISE EXCEPTION 'cmdbus_claim_states: unknown step %',
            quote_nullable(p_step) USING ERRCODE = '22023';
    END IF;
    PERFORM commandbus.cmdbus_check_lengths(
        'cmdbus_claim_states', v_n,
        ARRAY['p_command_ids', 'p_attempts', 'p_claims'],
        ARRAY[COALESCE(cardinality(p_command_ids), 0), cardinality(p_attempts),
              cardinality(p_claims)]);
    IF v_n = 0 THEN
        RETURN '{}'::TEXT[];
    END IF;
    IF array_position(p_command_ids, NULL) IS NOT NULL THEN
        RAISE EXCEPTION 'cmdbus_claim_states: p_command_ids contains NULL'
            USING ERRCODE = '22023';
    END IF;

    EXECUTE format(
        'SELECT array_agg(l.msg_id)
           FROM (SELECT q.msg_id FROM pgmq.%I q
                  WHERE q.msg_id = ANY($1::bigint[])
                  ORDER BY q.msg_id
                    FOR UPDATE) l',
        pgmq.format_table_name(p_queue_name, 'q'))
    INTO v_locked
    USING p_msg_ids;

    -- A new statement: it sees the commands and audit rows as committed
    -- after the locks were granted. CASE evaluates its branches in order,
    -- so the audit is read only where the cheaper checks passed; OFFSET 0
    -- keeps the state of each element from being computed more than once.
    RETURN ARRAY(
        SELECT CASE WHEN s.state = 'OWNED' AND s.owned_before > 0
                    THEN 'STALE' ELSE s.state END
          FROM (SELECT k.ord, k.state,
                       count(*) FILTER (WHERE k.state = 'OWNED')
                         OVER (PARTITION BY k.command_id ORDER BY k.ord
                               ROWS BETWEEN UNBOUNDED PRECEDING
                                        AND 1 PRECEDING) AS owned_before
                  FROM (SELECT t.ord, t.command_id,
                             CASE
                                 WHEN p_step = 'RETRY'
                                      AND EXISTS (
                                          SELECT 1 FROM commandbus.audit f
                                           WHERE f.command_id = t.command_id
                                             AND f.domain = p_domain
                                             AND f.event_type = 'FAILED'
                                             AND f.details_json -> 'msg_id'
                                                 = to_jsonb(t.msg_id)
                                             AND f.details_json -> 'attempt'
                                                 = to_jsonb(t.attempt))
                                      AND EXISTS (
                                          SELECT 1 FROM commandbus.audit a
                                           WHERE a.command_id = t.command_id
                                             AND a.domain = p_domain
                                             AND a.event_type = 'RECEIVED'
                                             AND a.details_json ->> 'claim'
                                                 = t.claim::text)
                                     THEN 'WRITTEN'
                                 WHEN COALESCE(t.msg_id = ANY(v_locked), FALSE)
                                      AND c.status = 'IN_PROGRESS'
                                      AND c.attempts = t.attempt
                                      AND EXISTS (
                                          SELECT 1 FROM commandbus.audit a
                                           WHERE a.command_id = t.command_id
                                             AND a.domain = p_domain
                                             AND a.event_type = 'RECEIVED'
                                             AND a.details_json ->> 'claim'
                                                 = t.claim::text)
                                     THEN 'OWNED'
                                 WHEN p_step = 'FINISH'
                                      AND NOT COALESCE(t.msg_id = ANY(v_locked), FALSE)
                                      AND c.status IN ('COMPLETED', 'FAILED',
                                                       'IN_TROUBLESHOOTING_QUEUE',
                                                       'CANCELED')
                                      AND c.attempts = t.attempt
                                      AND c.msg_id = t.msg_id
                                      AND EXISTS (
                                          SELECT 1 FROM commandbus.audit a
                                           WHERE a.command_id = t.command_id
                                             AND a.domain = p_domain
                                             AND a.event_type = 'RECEIVED'
                                             AND a.details_json ->> 'claim'
                                                 = t.claim::text)
                                     THEN 'WRITTEN'
                                 ELSE 'STALE'
                             END AS state
                        FROM unnest(p_msg_ids, p_command_ids, p_attempts, p_claims)
                             WITH ORDINALITY AS t(msg_id, command_id, attempt,
                                                  claim, ord)
                        LEFT JOIN LATERAL (
                             SELECT c.status, c.attempts, c.msg_id
                               FROM commandbus.command c
                              WHERE c.domain = p_domain
                                AND c.command_id = t.command_id
                              LIMIT 1) c ON TRUE
                        OFFSET 0) k) s
         ORDER BY s.ord);
END;
$$;

-- -- cmdbus_complete_claimed -------------------------------------------------

-- cmdbus_complete for the owning elements (p_attempts and p_claims: the
-- deliveries' attempts and claim tokens). Rows: first (NULL, NULL, the
-- state of every element, in input order), then those of cmdbus_complete
-- (states NULL).
CREATE FUNCTION commandbus.cmdbus_complete_claimed(
    p_domain      TEXT,
    p_queue_name  TEXT,
    p_msg_ids     BIGINT[],
    p_command_ids UUID[],
    p_attempts    INT[],
    p_claims      UUID[],
    p_has_result  BOOLEAN[],
    p_reply_tos   TEXT[],
    p_replies     JSONB[]
) RETURNS TABLE(batch_id UUID, batch_complete BOOLEAN, states TEXT[])
LANGUAGE plpgsql
AS $$
DECLARE
    v_states TEXT[];
    v_keep   INT[];
BEGIN
    PERFORM commandbus.cmdbus_check_lengths(
        'cmdbus_complete_claimed', COALESCE(cardinality(p_msg_ids), 0),
        ARRAY['p_has_result', 'p_reply_tos', 'p_replies'],
        ARRAY[cardinality(p_has_result), cardinality(p_reply_tos),
              cardinality(p_replies)]);
    v_states := commandbus.cmdbus_claim_states(
        p_domain, p_queue_name, 'FINISH', p_msg_ids, p_command_ids,
        p_attempts, p_claims);
    v_keep := commandbus.cmdbus_positions(v_states, 'OWNED'::text);
    RETURN QUERY SELECT NULL::UUID, NULL::BOOLEAN, v_states;
    RETURN QUERY
    SELECT f.batch_id, f.batch_complete, NULL::TEXT[]
      FROM commandbus.cmdbus_complete(
               p_domain, p_queue_name,
               commandbus.cmdbus_pick(p_msg_ids, v_keep),
               commandbus.cmdbus_pick(p_command_ids, v_keep),
               commandbus.cmdbus_pick(p_has_result, v_keep),
               commandbus.cmdbus_pick(p_reply_tos, v_keep),
               commandbus.cmdbus_pick(p_replies, v_keep)) f;
END;
$$;

-- -- cmdbus_fail_final_claimed -----------------------------------------------

-- cmdbus_fail_final for the owning elements (p_attempts are the deliveries'
-- attempts, p_claims their claim tokens); rows as in
-- cmdbus_complete_claimed.
CREATE FUNCTION commandbus.cmdbus_fail_final_claimed(
    p_domain        TEXT,
    p_queue_name    TEXT,
    p_kind          TEXT,
    p_msg_ids       BIGINT[],
    p_command_ids   UUID[],
    p_attempts      INT[],
    p_claims        UUID[],
    p_max_attempts  INT[],
    p_error_types   TEXT[],
    p_error_codes   TEXT[],
    p_error_msgs    TEXT[],
    p_error_details JSONB[],
    p_reply_tos     TEXT[],
    p_replies       JSONB[]
) RETURNS TABLE(batch_id UUID, batch_complete BOOLEAN, states TEXT[])
LANGUAGE plpgsql
AS $$
DECLARE
    v_states TEXT[];
    v_keep   INT[];
BEGIN
    PERFORM commandbus.cmdbus_check_lengths(
        'cmdbus_fail_final_claimed', COALESCE(cardinality(p_msg_ids), 0),
        ARRAY['p_max_attempts', 'p_error_types', 'p_error_codes',
              'p_error_msgs', 'p_error_details', 'p_reply_tos', 'p_replies'],
        ARRAY[cardinality(p_max_attempts), cardinality(p_error_types),
              cardinality(p_error_codes), cardinality(p_error_msgs),
              cardinality(p_error_details), cardinality(p_reply_tos),
              cardinality(p_replies)]);
    v_states := commandbus.cmdbus_claim_states(
        p_domain, p_queue_name, 'FINISH', p_msg_ids, p_command_ids,
        p_attempts, p_claims);
    v_keep := commandbus.cmdbus_positions(v_states, 'OWNED'::text);
    RETURN QUERY SELECT NULL::UUID, NULL::BOOLEAN, v_states;
    RETURN QUERY
    SELECT f.batch_id, f.batch_complete, NULL::TEXT[]
      FROM commandbus.cmdbus_fail_final(
               p_domain, p_queue_name, p_kind,
               commandbus.cmdbus_pick(p_msg_ids, v_keep),
               commandbus.cmdbus_pick(p_command_ids, v_keep),
               commandbus.cmdbus_pick(p_attempts, v_keep),
               commandbus.cmdbus_pick(p_max_attempts, v_keep),
               commandbus.cmdbus_pick(p_error_types, v_keep),
               commandbus.cmdbus_pick(p_error_codes, v_keep),
               commandbus.cmdbus_pick(p_error_msgs, v_keep),
               commandbus.cmdbus_pick(p_error_details, v_keep),
               commandbus.cmdbus_pick(p_reply_tos, v_keep),
               commandbus.cmdbus_pick(p_replies, v_keep)) f;
END;
$$;

-- -- cmdbus_fail_transient_claimed -------------------------------------------

-- cmdbus_fail_transient for the owning elements (p_attempts are the
-- deliveries' attempts, p_claims their claim tokens). Returns the state of
-- every element, in input order.
CREATE FUNCTION commandbus.cmdbus_fail_transient_claimed(
    p_domain          TEXT,
    p_queue_name      TEXT,
    p_msg_ids         BIGINT[],
    p_command_ids     UUID[],
    p_attempts        INT[],
    p_claims          UUID[],
    p_max_attempts    INT[],
    p_error_codes     TEXT[],
    p_error_msgs      TEXT[],
    p_backoff_seconds INT[]
) RETURNS TEXT[]
LANGUAGE plpgsql
AS $$
DECLARE
    v_states TEXT[];
    v_keep   INT[];
BEGIN
    PERFORM commandbus.cmdbus_check_lengths(
        'cmdbus_fail_transient_claimed', COALESCE(cardinality(p_msg_ids), 0),
        ARRAY['p_max_attempts', 'p_error_codes', 'p_error_msgs',
              'p_backoff_seconds'],
        ARRAY[cardinality(p_max_attempts), cardinality(p_error_codes),
              cardinality(p_error_msgs), cardinality(p_backoff_seconds)]);
    v_states := commandbus.cmdbus_claim_states(
        p_domain, p_queue_name, 'RETRY', p_msg_ids, p_command_ids,
        p_attempts, p_claims);
    v_keep := commandbus.cmdbus_positions(v_states, 'OWNED'::text);
    PERFORM commandbus.cmdbus_fail_transient(
        p_domain, p_queue_name,
        commandbus.cmdbus_pick(p_msg_ids, v_keep),
        commandbus.cmdbus_pick(p_command_ids, v_keep),
        commandbus.cmdbus_pick(p_attempts, v_keep),
        commandbus.cmdbus_pick(p_max_attempts, v_keep),
        commandbus.cmdbus_pick(p_error_codes, v_keep),
        commandbus.cmdbus_pick(p_error_msgs, v_keep),
        commandbus.cmdbus_pick(p_backoff_seconds, v_keep));
    RETURN v_states;
END;
$$;
