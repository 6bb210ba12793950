-- cmdbus's own set-based send functions, added beside the reference
-- procedures (nothing of the reference changes). Each performs the writes of
-- the reference's send transaction as ONE statement, so that a send costs
-- one round trip and can run inside the caller's own transaction (outbox):
--   [batch exists?] + command exists? + pgmq.send + command row (PENDING) +
--   audit SENT + NOTIFY pgmq_notify_{queue} (delivered at commit; see
--   docs/design.md, "NOTIFY on every send").
-- Messages are encoded by the client (the command JSON of docs/design.md,
-- "Wire compatibility"); the same correlation id goes into the message and
-- the row (docs/design.md, "Correlation id and batch id on bulk sends").
--
-- Errors raised with our own SQLSTATEs:
--   CB001 duplicate command (cmdbus_send_command; DETAIL: the command_id)
--   CB002 batch not found   (DETAIL: the batch_id)
-- cmdbus_send_commands, and a concurrent duplicate that passes the
-- existence check of cmdbus_send_command, fail on uq_command_domain_cmdid
-- with 23505 instead.

-- -- cmdbus_send_command ---------------------------------------------------

-- Sends one command. Returns the PGMQ msg_id.
CREATE FUNCTION commandbus.cmdbus_send_command(
    p_domain         TEXT,
    p_queue_name     TEXT,
    p_command_id     UUID,
    p_command_type   TEXT,
    p_message        JSONB,
    p_correlation_id UUID,
    p_reply_to       TEXT,
    p_max_attempts   INT,
    p_batch_id       UUID
) RETURNS BIGINT
LANGUAGE plpgsql
AS $$
DECLARE
    v_msg_id BIGINT;
BEGIN
    IF p_batch_id IS NOT NULL AND NOT EXISTS (
        SELECT 1 FROM commandbus.batch b
         WHERE b.domain = p_domain AND b.batch_id = p_batch_id) THEN
        RAISE EXCEPTION 'batch % not found in domain %', p_batch_id, p_domain
            USING ERRCODE = 'CB002', DETAIL = p_batch_id::text;
    END IF;

    IF EXISTS (
        SELECT 1 FROM commandbus.command c
         WHERE c.domain = p_domain AND c.command_id = p_command_id) THEN
        RAISE EXCEPTION 'duplicate command % in domain %', p_command_id, p_domain
            USING ERRCODE = 'CB001', DETAIL = p_command_id::text;
    END IF;

    SELECT s INTO v_msg_id FROM pgmq.send(p_queue_name, p_message, 0) AS s;

    INSERT INTO commandbus.command (
        domain, queue_name, msg_id, command_id, command_type, status,
        attempts, max_attempts, reply_queue, correlation_id, batch_id)
    VALUES (
        p_domain, p_queue_name, v_msg_id, p_command_id, p_command_type,
        'PENDING', 0, p_max_attempts, COALESCE(p_reply_to, ''),
        p_correlation_id, p_batch_id);

    INSERT INTO commandbus.audit (domain, command_id, event_type, details_json)
    VALUES (p_domain, p_command_id, 'SENT',
            jsonb_build_object(
                'command_type', p_command_type,
                'correlation_id', p_correlation_id,
                'reply_to', p_reply_to,
                'msg_id', v_msg_id,
                'batch_id', p_batch_id));

    -- NOTIFY folds unquoted channel names to lower case; so do we.
    PERFORM pg_notify(lower('pgmq_notify_' || p_queue_name), '');
    RETURN v_msg_id;
END;
$$;

-- -- cmdbus_send_commands --------------------------------------------------

-- Sends many commands of one domain with one pgmq.send_batch, one multi-row
-- command insert, one multi-row audit insert and one NOTIFY. The arrays are
-- parallel (same length). Returns (command_id, msg_id) in input order.
-- Audit details carry batch_id only for commands that have one.
CREATE FUNCTION commandbus.cmdbus_send_commands(
    p_domain          TEXT,
    p_queue_name      TEXT,
    p_command_ids     UUID[],
    p_command_types   TEXT[],
    p_messages        JSONB[],
    p_correlation_ids UUID[],
    p_reply_tos       TEXT[],
    p_max_attempts    INT[],
    p_batch_ids       UUID[]
) RETURNS TABLE(command_id UUID, msg_id BIGINT)
LANGUAGE plpgsql
AS $$
DECLARE
    v_n         INT := COALESCE(array_length(p_command_ids, 1), 0);
    v_batch     UUID;
    v_msg_ids   BIGINT[];
BEGIN
    IF v_n = 0 THEN
        RETURN;
    END IF;
    IF array_length(p_command_types, 1) IS DISTINCT FROM v_n
       OR array_length(p_messages, 1) IS DISTINCT FROM v_n
       OR array_length(p_correlation_ids, 1) IS DISTINCT FROM v_n
       OR array_length(p_reply_tos, 1) IS DISTINCT FROM v_n
       OR array_length(p_max_attempts, 1) IS DISTINCT FROM v_n
       OR array_length(p_batch_ids, 1) IS DISTINCT FROM v_n THEN
        RAISE EXCEPTION 'cmdbus_send_commands: arrays must all have % elements', v_n;
    END IF;

    SELECT x.id INTO v_batch
      FROM unnest(p_batch_ids) AS x(id)
     WHERE x.id IS NOT NULL
       AND NOT EXISTS (SELECT 1 FROM commandbus.batch b
                        WHERE b.domain = p_domain AND b.batch_id = x.id)
     LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'batch % not found in domain %', v_batch, p_domain
            USING ERRCODE = 'CB002', DETAIL = v_batch::text;
    END IF;

    -- No separate duplicate check: the unique index uq_command_domain_cmdid
    -- rejects a duplicate (23505) with one probe per row that the insert
    -- makes anyway, whatever the planner statistics say.

    -- One INSERT: identity values follow the array order, so sorting the
    -- returned ids pairs them with the input positions.
    SELECT array_agg(s.id ORDER BY s.id) INTO v_msg_ids
      FROM pgmq.send_batch(p_queue_name, p_messages, 0) AS s(id);

    -- unnest() with several arrays zips them position by position.
    INSERT INTO commandbus.command (
        domain, queue_name, msg_id, command_id, command_type, status,
        attempts, max_attempts, reply_queue, correlation_id, batch_id)
    SELECT p_domain, p_queue_name, t.msg_id, t.command_id, t.command_type,
           'PENDING', 0, t.max_attempts, COALESCE(t.reply_to, ''),
           t.correlation_id, t.batch_id
      FROM unnest(p_command_ids, p_command_types, p_correlation_ids,
                  p_reply_tos, p_max_attempts, p_batch_ids, v_msg_ids)
           AS t(command_id, command_type, correlation_id, reply_to,
                max_attempts, batch_id, msg_id);

    INSERT INTO commandbus.audit (domain, command_id, event_type, details_json)
    SELECT p_domain, t.command_id, 'SENT',
           CASE WHEN t.batch_id IS NULL THEN
               jsonb_build_object(
                   'command_type', t.command_type,
                   'correlation_id', t.correlation_id,
                   'reply_to', t.reply_to,
                   'msg_id', t.msg_id)
           ELSE
               jsonb_build_object(
                   'command_type', t.command_type,
                   'correlation_id', t.correlation_id,
                   'reply_to', t.reply_to,
                   'msg_id', t.msg_id,
                   'batch_id', t.batch_id)
           END
      FROM unnest(p_command_ids, p_command_types, p_correlation_ids,
                  p_reply_tos, p_batch_ids, v_msg_ids)
           AS t(command_id, command_type, correlation_id, reply_to,
                batch_id, msg_id);

    PERFORM pg_notify(lower('pgmq_notify_' || p_queue_name), '');

    RETURN QUERY
    SELECT t.command_id, t.msg_id
      FROM unnest(p_command_ids, v_msg_ids) AS t(command_id, msg_id);
END;
$$;
