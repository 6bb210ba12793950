-- Delayed commands (docs/scheduling.md, "Delayed commands"): the bulk send
-- of cmdbus_send_commands (V003) with a not-before time per command. The
-- delay is PGMQ's own: a message's vt is its not-before time when that is
-- later than the server's clock (as pgmq.send(queue, msg, delay timestamptz)
-- sets it), so every reader of the queue, ours or the reference's, leaves it
-- alone until then. The message JSON, the command row (PENDING), the SENT
-- audit and the NOTIFY are exactly those of cmdbus_send_commands. The client
-- calls this function only for a domain's commands of which at least one has
-- a not-before time; the others keep cmdbus_send_commands and its plan.
--
-- Errors: as cmdbus_send_commands (CB002 for an unknown batch, 23505 on
-- uq_command_domain_cmdid for a duplicate).

CREATE FUNCTION commandbus.cmdbus_send_commands_at(
    p_domain          TEXT,
    p_queue_name      TEXT,
    p_command_ids     UUID[],
    p_command_types   TEXT[],
    p_messages        JSONB[],
    p_correlation_ids UUID[],
    p_reply_tos       TEXT[],
    p_max_attempts    INT[],
    p_batch_ids       UUID[],
    p_not_before      TIMESTAMPTZ[]
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
       OR array_length(p_batch_ids, 1) IS DISTINCT FROM v_n
       OR array_length(p_not_before, 1) IS DISTINCT FROM v_n THEN
        RAISE EXCEPTION 'cmdbus_send_commands_at: arrays must all have % elements', v_n;
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

    -- One INSERT into the queue table (named and checked by PGMQ's own
    -- format_table_name), rows in array order, so that sorting the returned
    -- identity values pairs them with the input positions. GREATEST ignores
    -- a NULL not-before time: such a command is visible at once.
    EXECUTE format(
        'WITH i AS (INSERT INTO pgmq.%I (vt, message) '
        'SELECT GREATEST(clock_timestamp(), t.nb), t.msg '
        'FROM unnest($1::jsonb[], $2::timestamptz[]) WITH ORDINALITY '
        'AS t(msg, nb, n) ORDER BY t.n RETURNING msg_id) '
        'SELECT array_agg(i.msg_id ORDER BY i.msg_id) FROM i',
        pgmq.format_table_name(p_queue_name, 'q'))
      INTO v_msg_ids
      USING p_messages, p_not_before;

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
