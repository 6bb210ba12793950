-- Deferred claims: a command whose handler finishes quickly is claimed and
-- completed by ONE write of its row instead of two. Added beside V004, V007
-- and V010 (their functions keep their signatures and behaviour; the
-- reference's objects are untouched).
--
-- Why: a claim (status IN_PROGRESS, attempts + 1, RECEIVED audit) and a
-- completion (status COMPLETED, COMPLETED audit) each write a new version
-- of the command row. Its status and updated_at are indexed (the
-- reference's indexes), so no update of it can be a HOT update: each one
-- inserts into all six indexes. A handler that returns within a few
-- milliseconds makes the IN_PROGRESS version visible to nobody for long.
--
-- How: the read (cmdbus_receive_deferred) takes the messages like
-- pgmq.read, and leaves the commands that qualify unclaimed ("DEFERRED"):
-- PENDING, not in a batch, once in the read, with a message naming them.
-- Everything else is claimed at once as cmdbus_claim_read does. The worker
-- runs a deferred command's handler at once; then
--   * on success: cmdbus_complete_deferred writes, in one transaction, the
--     message delete, status COMPLETED with attempts set, the RECEIVED and
--     the COMPLETED audit rows and the reply: the rows a claim followed by
--     a completion writes, with one version of the command row;
--   * on any other outcome, and for a handler that still runs at the
--     worker's next lease heartbeat: cmdbus_claim_deferred claims it (as
--     the read would have), then the V007 functions write the outcome.
--
-- The fence of a deferred delivery (msg_id, read_ct, vt, command_id,
-- attempts seen, attempt, claim token) is the read itself: it OWNS its
-- message while the message is in the queue with the read_ct and the vt
-- that read gave it, and the command is PENDING with the attempts the read
-- saw. Any later read changes vt (a read after a failover that forgot ours
-- gives the same read_ct but a later vt); a claim changes the status. The
-- lease heartbeat claims a deferred delivery before it ever extends its vt.
-- A deferred delivery that no longer owns its message is handed to the V007
-- fence (cmdbus_claim_states): claimed since by its own heartbeat (OWNED),
-- already written by an earlier attempt of the same write (WRITTEN), or
-- STALE.
--
-- Attempts: a deferred delivery's attempt is GREATEST(attempts + 1,
-- read_ct). pgmq counts every read durably in read_ct, in the read's own
-- transaction, so a delivery lost before its claim (a crash while the
-- handler ran) still counts towards max_attempts at the next read.
--
-- Audit: a deferred command's RECEIVED row is written with its outcome
-- (just before the COMPLETED row, or by the claim), with the same details
-- {msg_id, attempt, max_attempts, claim} as an immediate claim's.

-- -- cmdbus_send_replies ------------------------------------------------------

-- Sends p_replies[i] to p_reply_tos[i] where that is neither NULL nor '':
-- per distinct queue (sorted) the queue is created if missing, one
-- pgmq.send_batch of its replies in input order and one NOTIFY
-- pgmq_notify_{queue}; cmdbus_finish_commands' step 5. Raises 22023 for a
-- name that is no queue name or a reply_to without a reply.
CREATE FUNCTION commandbus.cmdbus_send_replies(
    p_reply_tos TEXT[],
    p_replies   JSONB[]
) RETURNS VOID
LANGUAGE plpgsql
AS $$
DECLARE
    v_queue TEXT;
BEGIN
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
        PERFORM pg_notify(lower('pgmq_notify_' || v_queue), '');
    END LOOP;
END;
$$;

-- -- cmdbus_defer_read ----------------------------------------------------------

-- The messages already read from p_queue_name (rows of pgmq.read or
-- cmdbus_read): those whose command qualifies (see the top) come back
-- unclaimed with outcome 'DEFERRED', attempts = the delivery's attempt and
-- seen_attempts = the command's attempts as read; all others go through
-- cmdbus_claim_read (claimed 'OK', or 'SKIPPED' / 'INVALID' and archived),
-- seen_attempts NULL. Every row carries the message's read_ct and its vt in
-- microseconds since the epoch (the deferred fence). The deferred rows come
-- first, each part in msg_id order.
CREATE FUNCTION commandbus.cmdbus_defer_read(
    p_domain     TEXT,
    p_queue_name TEXT,
    p_claim      UUID,
    p_read       pgmq.message_record[]
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
LANGUAGE plpgsql
-- Index probes only, whatever the statistics (see "Plans" in V004).
SET enable_seqscan = off
AS $$
DECLARE
    v_deferred BIGINT[];
    v_cids     UUID[];
    v_types    TEXT[];
    v_attempts INT[];
    v_max      INT[];
BEGIN
    IF COALESCE(cardinality(p_read), 0) = 0 THEN
        RETURN;
    END IF;

    -- Which messages qualify: a message naming its command (a UUID), the
    -- only message of that command in the read, the command PENDING and
    -- outside any batch. A plain probe per message: nothing is locked or
    -- written for them here.
    SELECT array_agg(t.msg_id ORDER BY t.msg_id),
           array_agg(t.cid ORDER BY t.msg_id),
           array_agg(c.command_type ORDER BY t.msg_id),
           array_agg(c.attempts ORDER BY t.msg_id),
           array_agg(c.max_attempts ORDER BY t.msg_id)
      INTO v_deferred, v_cids, v_types, v_attempts, v_max
      FROM (SELECT m.msg_id, x.cid,
                   count(*) OVER (PARTITION BY x.cid) AS n
              FROM unnest(p_read) AS m
             CROSS JOIN LATERAL (
                   SELECT CASE
                              WHEN jsonb_typeof(m.message) = 'object'
                               AND jsonb_typeof(m.message -> 'command_id') = 'string'
                               AND (m.message ->> 'command_id') ~*
                                   '^(\{[0-9a-f]{4}(-?[0-9a-f]{4}){7}\}|[0-9a-f]{4}(-?[0-9a-f]{4}){7})$'
                              THEN (m.message ->> 'command_id')::uuid
                          END AS cid) x) t
     CROSS JOIN LATERAL (
           SELECT c.status, c.batch_id, c.command_type, c.attempts,
                  c.max_attempts
             FROM commandbus.command c
            WHERE c.domain = p_domain
              AND c.command_id = t.cid
            LIMIT 1) c
     WHERE t.cid IS NOT NULL AND t.n = 1
       AND c.status = 'PENDING' AND c.batch_id IS NULL;
    v_deferred := COALESCE(v_deferred, '{}');

    IF cardinality(v_deferred) > 0 THEN
        RETURN QUERY
        SELECT m.msg_id, m.read_ct,
               (extract(epoch FROM m.vt) * 1000000)::bigint, m.message,
               'DEFERRED'::text, d.cid, d.command_type,
               GREATEST(d.attempts + 1, m.read_ct), d.attempts,
               d.max_attempts, NULL::uuid
          FROM unnest(v_deferred, v_cids, v_types, v_attempts, v_max)
               AS d(msg_id, cid, command_type, attempts, max_attempts)
          JOIN unnest(p_read) AS m ON m.msg_id = d.msg_id
         ORDER BY m.msg_id;
    END IF;

    IF cardinality(v_deferred) = cardinality(p_read) THEN
        RETURN;
    END IF;
    RETURN QUERY
    SELECT r.msg_id, r.read_ct, (extract(epoch FROM m.vt) * 1000000)::bigint,
           r.message, r.outcome, r.command_id, r.command_type, r.attempts,
           NULL::int, r.max_attempts, r.batch_id
      FROM commandbus.cmdbus_claim_read(
               p_domain, p_queue_name, p_claim,
               ARRAY(SELECT m FROM unnest(p_read) AS m
                      WHERE NOT m.msg_id = ANY(v_deferred))) r
      JOIN unnest(p_read) AS m ON m.msg_id = r.msg_id
     ORDER BY r.msg_id;
END;
$$;

-- -- cmdbus_receive_deferred -----------------------------------------------------

-- pgmq.read(p_queue_name, p_vt, p_qty) + cmdbus_defer_read: what a worker
-- calls for a domain read in msg_id order.
CREATE FUNCTION commandbus.cmdbus_receive_deferred(
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
               ARRAY(SELECT m FROM pgmq.read(p_queue_name, p_vt, p_qty) m)) d
$$;

-- -- cmdbus_deferred_owned -------------------------------------------------------

-- Locks the queue rows of the deferred deliveries, then their commands, and
-- returns per element whether it owns its message (see the top): the
-- message in the queue with read_ct p_read_cts[i] and vt p_vt_us[i], the
-- command PENDING with attempts p_seen[i], and the first such element of
-- its command in the call; and the ctid of each owner's command row (NULL
-- for the others), current while the caller's transaction holds the locks.
-- Locks in the global order: queue rows by msg_id, then command rows by
-- command_id.
CREATE FUNCTION commandbus.cmdbus_deferred_owned(
    p_domain      TEXT,
    p_queue_name  TEXT,
    p_msg_ids     BIGINT[],
    p_read_cts    INT[],
    p_vt_us       BIGINT[],
    p_command_ids UUID[],
    p_seen        INT[],
    OUT owned     BOOLEAN[],
    OUT tids      TID[]
)
LANGUAGE plpgsql
SET enable_seqscan = off
AS $$
DECLARE
    v_n        INT := COALESCE(cardinality(p_msg_ids), 0);
    v_held     BIGINT[];  -- positions (1-based) of the elements
    v_ids      UUID[];
    v_status   TEXT[];
    v_attempts INT[];
    v_tids     TID[];
BEGIN
    PERFORM commandbus.cmdbus_check_lengths(
        'cmdbus_deferred_owned', v_n,
        ARRAY['p_read_cts', 'p_vt_us', 'p_command_ids', 'p_seen'],
        ARRAY[cardinality(p_read_cts), cardinality(p_vt_us),
              COALESCE(cardinality(p_command_ids), 0), cardinality(p_seen)]);
    IF v_n = 0 THEN
        owned := '{}';
        tids := '{}';
        RETURN;
    END IF;

    -- The elements whose message is still as their read left it (by
    -- position: two deliveries of one message differ in read_ct or vt).
    -- All their queue rows are locked, in msg_id order.
    EXECUTE format(
        'SELECT array_agg(l.ord)
           FROM (SELECT t.ord
                   FROM (SELECT q.msg_id, q.read_ct, q.vt FROM pgmq.%I q
                          WHERE q.msg_id = ANY($1::bigint[])
                          ORDER BY q.msg_id
                            FOR UPDATE) q
                   JOIN unnest($1::bigint[], $2::int[], $3::bigint[])
                        WITH ORDINALITY AS t(msg_id, read_ct, vt_us, ord)
                        ON t.msg_id = q.msg_id
                  WHERE q.read_ct = t.read_ct
                    AND (extract(epoch FROM q.vt) * 1000000)::bigint
                        = t.vt_us) l',
        pgmq.format_table_name(p_queue_name, 'q'))
    INTO v_held
    USING p_msg_ids, p_read_cts, p_vt_us;
    v_held := COALESCE(v_held, '{}');

    -- Their commands, locked in command_id order (one probe per id).
    SELECT array_agg(l.command_id ORDER BY l.command_id),
           array_agg(l.status ORDER BY l.command_id),
           array_agg(l.attempts ORDER BY l.command_id),
           array_agg(l.tid ORDER BY l.command_id)
      INTO v_ids, v_status, v_attempts, v_tids
      FROM (SELECT s.command_id, c.status, c.attempts, c.tid
              FROM (SELECT DISTINCT t.command_id
                      FROM unnest(p_command_ids) WITH ORDINALITY
                           AS t(command_id, ord)
                     WHERE t.ord = ANY(v_held)
                     ORDER BY t.command_id) s
             CROSS JOIN LATERAL (
                   SELECT c.ctid AS tid, c.status, c.attempts
                     FROM commandbus.command c
                    WHERE c.domain = p_domain
                      AND c.command_id = s.command_id
                    LIMIT 1
                      FOR UPDATE) c) l;

    SELECT array_agg(o.owned AND o.rn = 1 ORDER BY o.ord),
           array_agg(CASE WHEN o.owned AND o.rn = 1 THEN o.tid END
                     ORDER BY o.ord)
      INTO owned, tids
      FROM (SELECT t.ord, x.owned, c.tid,
                       row_number() OVER (PARTITION BY t.command_id, x.owned
                                          ORDER BY t.ord) AS rn
                  FROM unnest(p_msg_ids, p_command_ids, p_seen)
                       WITH ORDINALITY AS t(msg_id, command_id, seen, ord)
                  LEFT JOIN unnest(v_ids, v_status, v_attempts, v_tids)
                       AS c(command_id, status, attempts, tid)
                       ON c.command_id = t.command_id
                 CROSS JOIN LATERAL (
                       SELECT (t.ord = ANY(v_held) AND c.status = 'PENDING'
                               AND c.attempts = t.seen) IS TRUE AS owned) x) o;
END;
$$;

-- -- cmdbus_claim_deferred -------------------------------------------------------

-- Claims the deferred deliveries that still own their message (see
-- cmdbus_deferred_owned): attempts = p_attempts[i], status IN_PROGRESS,
-- updated_at, and the RECEIVED audit {msg_id, attempt, max_attempts, claim}
-- an immediate claim writes, in input order. From then on the V007
-- functions fence the delivery by its claim. Returns per element whether it
-- was claimed; a delivery that no longer owns its message is left alone.
CREATE FUNCTION commandbus.cmdbus_claim_deferred(
    p_domain       TEXT,
    p_queue_name   TEXT,
    p_msg_ids      BIGINT[],
    p_read_cts     INT[],
    p_vt_us        BIGINT[],
    p_command_ids  UUID[],
    p_seen         INT[],
    p_attempts     INT[],
    p_max_attempts INT[],
    p_claims       UUID[]
) RETURNS BOOLEAN[]
LANGUAGE plpgsql
SET enable_seqscan = off
AS $$
DECLARE
    v_owned BOOLEAN[];
    v_tids  TID[];
BEGIN
    PERFORM commandbus.cmdbus_check_lengths(
        'cmdbus_claim_deferred', COALESCE(cardinality(p_msg_ids), 0),
        ARRAY['p_attempts', 'p_max_attempts', 'p_claims'],
        ARRAY[cardinality(p_attempts), cardinality(p_max_attempts),
              cardinality(p_claims)]);
    SELECT o.owned, o.tids INTO v_owned, v_tids
      FROM commandbus.cmdbus_deferred_owned(
               p_domain, p_queue_name, p_msg_ids, p_read_cts, p_vt_us,
               p_command_ids, p_seen) o;
    IF NOT TRUE = ANY(v_owned) THEN
        RETURN v_owned;
    END IF;

    UPDATE commandbus.command c
       SET attempts = f.attempt,
           status = 'IN_PROGRESS',
           updated_at = NOW()
      FROM unnest(v_tids, p_attempts) AS f(tid, attempt)
     WHERE c.ctid = f.tid;

    INSERT INTO commandbus.audit (ts, domain, command_id, event_type, details_json)
    SELECT clock_timestamp(), p_domain, t.command_id, 'RECEIVED',
           jsonb_build_object('msg_id', t.msg_id, 'attempt', t.attempt,
                              'max_attempts', t.max_attempts)
           || CASE WHEN t.claim IS NULL THEN '{}'::jsonb
                   ELSE jsonb_build_object('claim', t.claim) END
      FROM unnest(p_msg_ids, p_command_ids, p_attempts, p_max_attempts,
                  p_claims, v_owned) WITH ORDINALITY
           AS t(msg_id, command_id, attempt, max_attempts, claim, owned, ord)
     WHERE t.owned
     ORDER BY t.ord;
    RETURN v_owned;
END;
$$;

-- -- cmdbus_complete_deferred ----------------------------------------------------

-- The success path of deferred deliveries. Those that own their message are
-- claimed and completed with one version of the command row: the message
-- deleted, attempts = p_attempts[i], status COMPLETED, updated_at; audit
-- RECEIVED {msg_id, attempt, max_attempts, claim} and COMPLETED {msg_id,
-- reply_to, has_result}; the SUCCESS reply sent (none of them is in a
-- batch: such commands are never deferred). The others go to
-- cmdbus_complete_claimed with their attempt and claim: claimed since by
-- the lease heartbeat, already written, or stale. Rows as
-- cmdbus_complete_claimed's: first (NULL, NULL, the state of every element
-- in input order: OWNED, WRITTEN or STALE), then the batches with a counted
-- transition.
CREATE FUNCTION commandbus.cmdbus_complete_deferred(
    p_domain       TEXT,
    p_queue_name   TEXT,
    p_msg_ids      BIGINT[],
    p_read_cts     INT[],
    p_vt_us        BIGINT[],
    p_command_ids  UUID[],
    p_seen         INT[],
    p_attempts     INT[],
    p_max_attempts INT[],
    p_claims       UUID[],
    p_has_result   BOOLEAN[],
    p_reply_tos    TEXT[],
    p_replies      JSONB[]
) RETURNS TABLE(batch_id UUID, batch_complete BOOLEAN, states TEXT[])
LANGUAGE plpgsql
SET enable_seqscan = off
AS $$
DECLARE
    v_n      INT := COALESCE(cardinality(p_msg_ids), 0);
    v_owned  BOOLEAN[];
    v_tids   TID[];
    v_fast   INT[];
    v_rest   INT[];
    v_states TEXT[];
    v_rest_states TEXT[];
    v_batches     UUID[];
    v_complete    BOOLEAN[];
BEGIN
    PERFORM commandbus.cmdbus_check_lengths(
        'cmdbus_complete_deferred', v_n,
        ARRAY['p_attempts', 'p_max_attempts', 'p_claims', 'p_has_result',
              'p_reply_tos', 'p_replies'],
        ARRAY[cardinality(p_attempts), cardinality(p_max_attempts),
              cardinality(p_claims), cardinality(p_has_result),
              cardinality(p_reply_tos), cardinality(p_replies)]);
    IF v_n = 0 THEN
        RETURN QUERY SELECT NULL::UUID, NULL::BOOLEAN, '{}'::TEXT[];
        RETURN;
    END IF;
    SELECT o.owned, o.tids INTO v_owned, v_tids
      FROM commandbus.cmdbus_deferred_owned(
               p_domain, p_queue_name, p_msg_ids, p_read_cts, p_vt_us,
               p_command_ids, p_seen) o;
    v_fast := commandbus.cmdbus_positions(v_owned, TRUE);
    v_rest := commandbus.cmdbus_positions(v_owned, FALSE);

    IF cardinality(v_fast) > 0 THEN
        PERFORM pgmq.delete(p_queue_name,
                            commandbus.cmdbus_pick(p_msg_ids, v_fast));

        UPDATE commandbus.command c
           SET attempts = f.attempt,
               status = 'COMPLETED',
               updated_at = NOW()
          FROM unnest(v_tids, p_attempts) AS f(tid, attempt)
         WHERE c.ctid = f.tid;

        INSERT INTO commandbus.audit (ts, domain, command_id, event_type, details_json)
        SELECT clock_timestamp(), p_domain, t.command_id, k.event_type,
               CASE k.event_type
                   WHEN 'RECEIVED' THEN
                       jsonb_build_object('msg_id', t.msg_id,
                                          'attempt', t.attempt,
                                          'max_attempts', t.max_attempts)
                       || CASE WHEN t.claim IS NULL THEN '{}'::jsonb
                               ELSE jsonb_build_object('claim', t.claim) END
                   ELSE
                       jsonb_build_object('msg_id', t.msg_id,
                                          'reply_to', NULLIF(t.reply_to, ''),
                                          'has_result',
                                          COALESCE(t.has_result, FALSE))
               END
          FROM unnest(p_msg_ids, p_command_ids, p_attempts, p_max_attempts,
                      p_claims, p_has_result, p_reply_tos, v_owned)
               WITH ORDINALITY
               AS t(msg_id, command_id, attempt, max_attempts, claim,
                    has_result, reply_to, owned, ord)
         CROSS JOIN (VALUES (1, 'RECEIVED'), (2, 'COMPLETED')) AS k(n, event_type)
         WHERE t.owned
         ORDER BY t.ord, k.n;

        PERFORM commandbus.cmdbus_send_replies(
            commandbus.cmdbus_pick(p_reply_tos, v_fast),
            commandbus.cmdbus_pick(p_replies, v_fast));
    END IF;

    v_states := array_fill('OWNED'::text, ARRAY[v_n]);
    IF cardinality(v_rest) = 0 THEN
        RETURN QUERY SELECT NULL::UUID, NULL::BOOLEAN, v_states;
        RETURN;
    END IF;

    -- The rest through V007's fence; its first row holds their states,
    -- the others its batches.
    SELECT max(r.states::text)::text[],
           array_agg(r.batch_id) FILTER (WHERE r.states IS NULL),
           array_agg(r.batch_complete) FILTER (WHERE r.states IS NULL)
      INTO v_rest_states, v_batches, v_complete
      FROM commandbus.cmdbus_complete_claimed(
               p_domain, p_queue_name,
               commandbus.cmdbus_pick(p_msg_ids, v_rest),
               commandbus.cmdbus_pick(p_command_ids, v_rest),
               commandbus.cmdbus_pick(p_attempts, v_rest),
               commandbus.cmdbus_pick(p_claims, v_rest),
               commandbus.cmdbus_pick(p_has_result, v_rest),
               commandbus.cmdbus_pick(p_reply_tos, v_rest),
               commandbus.cmdbus_pick(p_replies, v_rest)) r;
    FOR i IN 1 .. cardinality(v_rest) LOOP
        v_states[v_rest[i]] := v_rest_states[i];
    END LOOP;
    RETURN QUERY SELECT NULL::UUID, NULL::BOOLEAN, v_states;
    RETURN QUERY
    SELECT b.batch_id, b.batch_complete, NULL::TEXT[]
      FROM unnest(v_batches, v_complete) AS b(batch_id, batch_complete);
END;
$$;
