-- Fenced side effects: a worker writes the outcome of a delivery only while
-- that delivery still owns its message. Added beside the V004 functions,
-- which keep their signatures and behaviour.
--
-- Why: a message whose visibility timeout expires while its worker holds the
-- outcome unwritten (the database was unreachable, or the writer was slow)
-- can be read again by another worker, which claims the command once more
-- (attempts + 1) and runs the handler again. Without a fence both deliveries
-- would then write their outcome: the command would be completed twice, with
-- two COMPLETED audit rows and two replies. With the fence the stale
-- delivery's outcome is dropped, its message left alone, and the newer
-- delivery decides.
--
-- A delivery owns its message when
--   1. the message is still in the queue (locked here, FOR UPDATE, in msg_id
--      order: the queue rows come first in the lock order, as everywhere);
--   2. its command is IN_PROGRESS with attempts equal to the delivery's
--      attempt: every claim increments attempts, so a later claim of the
--      same command (of this message or of another one) ends the ownership.
-- Holding the queue row lock keeps any reader from claiming the message
-- between the check and the writes of the same transaction (pgmq.read skips
-- locked rows), so the check stays true until commit.
--
-- Each *_owned function takes the arguments of its V004 counterpart (with
-- p_attempts added to cmdbus_complete), applies it to the owned elements
-- only, and reports the others as stale_msg_ids.

-- -- helpers -----------------------------------------------------------------

-- Returns p_values[i] for each i of p_index, in p_index order (NULL for a
-- NULL array, which the V004 functions read as "all NULL").
CREATE FUNCTION commandbus.cmdbus_pick(p_values ANYARRAY, p_index INT[])
RETURNS ANYARRAY
LANGUAGE sql IMMUTABLE STRICT
AS $$
    SELECT ARRAY(SELECT p_values[u.i]
                   FROM unnest(p_index) WITH ORDINALITY AS u(i, ord)
                  ORDER BY u.ord)
$$;

-- Locks the queue rows of p_msg_ids and returns, per element, whether the
-- delivery (p_msg_ids[i], p_command_ids[i], p_attempts[i]) owns its message
-- (see the top of this file).
CREATE FUNCTION commandbus.cmdbus_owned(
    p_domain      TEXT,
    p_queue_name  TEXT,
    p_msg_ids     BIGINT[],
    p_command_ids UUID[],
    p_attempts    INT[]
) RETURNS BOOLEAN[]
LANGUAGE plpgsql
AS $$
DECLARE
    v_locked BIGINT[];
BEGIN
    IF COALESCE(cardinality(p_msg_ids), 0) = 0 THEN
        RETURN '{}'::BOOLEAN[];
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

    -- A new statement: it sees the commands as committed after the locks
    -- were taken.
    RETURN ARRAY(
        SELECT COALESCE(t.msg_id = ANY(v_locked), FALSE)
               AND EXISTS (SELECT 1
                             FROM commandbus.command c
                            WHERE c.domain = p_domain
                              AND c.command_id = t.command_id
                              AND c.status = 'IN_PROGRESS'
                              AND c.attempts = t.attempt)
          FROM unnest(p_msg_ids, p_command_ids, p_attempts) WITH ORDINALITY
               AS t(msg_id, command_id, attempt, ord)
         ORDER BY t.ord);
END;
$$;

-- Returns the indexes (1-based, ascending) where p_owned is p_want.
CREATE FUNCTION commandbus.cmdbus_where(p_owned BOOLEAN[], p_want BOOLEAN)
RETURNS INT[]
LANGUAGE sql IMMUTABLE STRICT
AS $$
    SELECT ARRAY(SELECT i FROM generate_subscripts(p_owned, 1) AS i
                  WHERE p_owned[i] = p_want ORDER BY i)
$$;

-- -- cmdbus_complete_owned ---------------------------------------------------

-- cmdbus_complete for the owned elements. Rows: one (NULL, NULL, stale
-- msg_ids) when any element was stale, then those of cmdbus_complete
-- (stale_msg_ids NULL).
CREATE FUNCTION commandbus.cmdbus_complete_owned(
    p_domain      TEXT,
    p_queue_name  TEXT,
    p_msg_ids     BIGINT[],
    p_command_ids UUID[],
    p_attempts    INT[],
    p_has_result  BOOLEAN[],
    p_reply_tos   TEXT[],
    p_replies     JSONB[]
) RETURNS TABLE(batch_id UUID, batch_complete BOOLEAN, stale_msg_ids BIGINT[])
LANGUAGE plpgsql
AS $$
DECLARE
    v_owned BOOLEAN[] := commandbus.cmdbus_owned(
        p_domain, p_queue_name, p_msg_ids, p_command_ids, p_attempts);
    v_keep  INT[] := commandbus.cmdbus_where(v_owned, TRUE);
BEGIN
    IF FALSE = ANY(v_owned) THEN
        RETURN QUERY SELECT NULL::UUID, NULL::BOOLEAN, commandbus.cmdbus_pick(
            p_msg_ids, commandbus.cmdbus_where(v_owned, FALSE));
    END IF;
    RETURN QUERY
    SELECT f.batch_id, f.batch_complete, NULL::BIGINT[]
      FROM commandbus.cmdbus_complete(
               p_domain, p_queue_name,
               commandbus.cmdbus_pick(p_msg_ids, v_keep),
               commandbus.cmdbus_pick(p_command_ids, v_keep),
               commandbus.cmdbus_pick(p_has_result, v_keep),
               commandbus.cmdbus_pick(p_reply_tos, v_keep),
               commandbus.cmdbus_pick(p_replies, v_keep)) f;
END;
$$;

-- -- cmdbus_fail_final_owned -------------------------------------------------

-- cmdbus_fail_final for the owned elements (p_attempts are the deliveries'
-- attempts); rows as in cmdbus_complete_owned.
CREATE FUNCTION commandbus.cmdbus_fail_final_owned(
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
) RETURNS TABLE(batch_id UUID, batch_complete BOOLEAN, stale_msg_ids BIGINT[])
LANGUAGE plpgsql
AS $$
DECLARE
    v_owned BOOLEAN[] := commandbus.cmdbus_owned(
        p_domain, p_queue_name, p_msg_ids, p_command_ids, p_attempts);
    v_keep  INT[] := commandbus.cmdbus_where(v_owned, TRUE);
BEGIN
    IF FALSE = ANY(v_owned) THEN
        RETURN QUERY SELECT NULL::UUID, NULL::BOOLEAN, commandbus.cmdbus_pick(
            p_msg_ids, commandbus.cmdbus_where(v_owned, FALSE));
    END IF;
    RETURN QUERY
    SELECT f.batch_id, f.batch_complete, NULL::BIGINT[]
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

-- -- cmdbus_fail_transient_owned ---------------------------------------------

-- cmdbus_fail_transient for the owned elements (p_attempts are the
-- deliveries' attempts). Returns the stale msg_ids ('{}' when none).
CREATE FUNCTION commandbus.cmdbus_fail_transient_owned(
    p_domain          TEXT,
    p_queue_name      TEXT,
    p_msg_ids         BIGINT[],
    p_command_ids     UUID[],
    p_attempts        INT[],
    p_max_attempts    INT[],
    p_error_codes     TEXT[],
    p_error_msgs      TEXT[],
    p_backoff_seconds INT[]
) RETURNS BIGINT[]
LANGUAGE plpgsql
AS $$
DECLARE
    v_owned BOOLEAN[] := commandbus.cmdbus_owned(
        p_domain, p_queue_name, p_msg_ids, p_command_ids, p_attempts);
    v_keep  INT[] := commandbus.cmdbus_where(v_owned, TRUE);
BEGIN
    PERFORM commandbus.cmdbus_fail_transient(
        p_domain, p_queue_name,
        commandbus.cmdbus_pick(p_msg_ids, v_keep),
        commandbus.cmdbus_pick(p_command_ids, v_keep),
        commandbus.cmdbus_pick(p_attempts, v_keep),
        commandbus.cmdbus_pick(p_max_attempts, v_keep),
        commandbus.cmdbus_pick(p_error_codes, v_keep),
        commandbus.cmdbus_pick(p_error_msgs, v_keep),
        commandbus.cmdbus_pick(p_backoff_seconds, v_keep));
    RETURN commandbus.cmdbus_pick(p_msg_ids,
                                  commandbus.cmdbus_where(v_owned, FALSE));
END;
$$;
