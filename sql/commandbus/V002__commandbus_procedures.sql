-- commandbus stored procedures: the reference's signatures with the
-- "inline counter" batch semantics of its packaged schema (docs/design.md,
-- "Inline batch counters" and "Exact batch counters and callbacks"):
-- sp_finish_command counts a command's transition into the batch counters
-- once, only when its status really changes, and returns whether the batch
-- just became terminal. sp_refresh_batch_stats (canonical V004 form) is the
-- repair/report path that recomputes the counters from the rows.
--
-- Lock order everywhere: command row, then batch row.
-- Run once by the migration runner inside its transaction. Everything is
-- schema-qualified; nothing here depends on search_path or on pgmq.

-- -- sp_start_batch ------------------------------------------------------------

-- Moves a PENDING batch to IN_PROGRESS (started_at, audit BATCH_STARTED with
-- command_id = batch_id). Returns TRUE only for that transition.
CREATE OR REPLACE FUNCTION commandbus.sp_start_batch(
    p_domain   TEXT,
    p_batch_id UUID
) RETURNS BOOLEAN
LANGUAGE plpgsql
AS $$
DECLARE
    v_status TEXT;
BEGIN
    SELECT b.status
      INTO v_status
      FROM commandbus.batch b
     WHERE b.domain = p_domain
       AND b.batch_id = p_batch_id
       FOR UPDATE;

    IF NOT FOUND OR v_status <> 'PENDING' THEN
        RETURN FALSE;
    END IF;

    UPDATE commandbus.batch b
       SET status = 'IN_PROGRESS',
           started_at = NOW()
     WHERE b.domain = p_domain
       AND b.batch_id = p_batch_id;

    INSERT INTO commandbus.audit (domain, command_id, event_type, details_json)
    VALUES (p_domain, p_batch_id, 'BATCH_STARTED',
            jsonb_build_object('batch_id', p_batch_id));

    RETURN TRUE;
END;
$$;

-- -- sp_receive_command --------------------------------------------------------

-- Claims a command for processing: attempts + 1, status = p_new_status,
-- unless it is COMPLETED or CANCELED (then, or if unknown: empty result).
-- Audits RECEIVED and starts the command's batch. Returns the post-update
-- row; msg_id and max_attempts prefer the given values over the stored ones
-- (the stored msg_id is not changed).
CREATE OR REPLACE FUNCTION commandbus.sp_receive_command(
    p_domain       TEXT,
    p_command_id   UUID,
    p_new_status   TEXT   DEFAULT 'IN_PROGRESS',
    p_msg_id       BIGINT DEFAULT NULL,
    p_max_attempts INT    DEFAULT NULL
) RETURNS TABLE (
    domain          TEXT,
    command_id      UUID,
    command_type    TEXT,
    status          TEXT,
    attempts        INT,
    max_attempts    INT,
    msg_id          BIGINT,
    correlation_id  UUID,
    reply_queue     TEXT,
    last_error_type TEXT,
    last_error_code TEXT,
    last_error_msg  TEXT,
    created_at      TIMESTAMPTZ,
    updated_at      TIMESTAMPTZ,
    batch_id        UUID
)
LANGUAGE plpgsql
AS $$
DECLARE
    v_row          commandbus.command%ROWTYPE;
    v_msg_id       BIGINT;
    v_max_attempts INT;
BEGIN
    UPDATE commandbus.command c
       SET attempts = c.attempts + 1,
           status = p_new_status,
           updated_at = NOW()
     WHERE c.domain = p_domain
       AND c.command_id = p_command_id
       AND c.status NOT IN ('COMPLETED', 'CANCELED')
    RETURNING c.* INTO v_row;

    IF NOT FOUND THEN
        RETURN;
    END IF;

    v_msg_id := COALESCE(p_msg_id, v_row.msg_id);
    v_max_attempts := COALESCE(p_max_attempts, v_row.max_attempts);

    INSERT INTO commandbus.audit (domain, command_id, event_type, details_json)
    VALUES (p_domain, p_command_id, 'RECEIVED',
            jsonb_build_object('msg_id', v_msg_id,
                               'attempt', v_row.attempts,
                               'max_attempts', v_max_attempts));

    IF v_row.batch_id IS NOT NULL THEN
        PERFORM commandbus.sp_start_batch(p_domain, v_row.batch_id);
    END IF;

    domain := v_row.domain;
    command_id := v_row.command_id;
    command_type := v_row.command_type;
    status := v_row.status;
    attempts := v_row.attempts;
    max_attempts := v_max_attempts;
    msg_id := v_msg_id;
    correlation_id := v_row.correlation_id;
    reply_queue := v_row.reply_queue;
    last_error_type := v_row.last_error_type;
    last_error_code := v_row.last_error_code;
    last_error_msg := v_row.last_error_msg;
    created_at := v_row.created_at;
    updated_at := v_row.updated_at;
    batch_id := v_row.batch_id;
    RETURN NEXT;
END;
$$;

-- -- sp_update_batch_counters --------------------------------------------------

-- Applies one counter change to a batch (row locked):
--   complete      completed + 1
--   failed        failed + 1
--   tsq_move      in_troubleshooting + 1
--   tsq_complete  in_troubleshooting - 1, completed + 1
--   tsq_cancel    in_troubleshooting - 1, canceled + 1
--   tsq_retry     in_troubleshooting - 1
-- A NULL or missing batch returns FALSE; an unknown update type raises.
-- When completed + canceled + failed = total and nothing is in the TSQ, a
-- batch that is not yet terminal becomes COMPLETED (or
-- COMPLETED_WITH_FAILURES if anything was canceled or failed), gets
-- completed_at and an audit BATCH_COMPLETED (command_id = batch_id), and the
-- function returns TRUE. It returns TRUE only on that transition.
CREATE OR REPLACE FUNCTION commandbus.sp_update_batch_counters(
    p_domain      TEXT,
    p_batch_id    UUID,
    p_update_type TEXT
) RETURNS BOOLEAN
LANGUAGE plpgsql
AS $$
DECLARE
    v_batch          commandbus.batch%ROWTYPE;
    v_completed      INT := 0;
    v_failed         INT := 0;
    v_tsq            INT := 0;
    v_canceled       INT := 0;
    v_status         TEXT;
BEGIN
    IF p_batch_id IS NULL THEN
        RETURN FALSE;
    END IF;

    SELECT b.*
      INTO v_batch
      FROM commandbus.batch b
     WHERE b.domain = p_domain
       AND b.batch_id = p_batch_id
       FOR UPDATE;

    IF NOT FOUND THEN
        RETURN FALSE;
    END IF;

    CASE p_update_type
        WHEN 'complete' THEN
            v_completed := 1;
        WHEN 'failed' THEN
            v_failed := 1;
        WHEN 'tsq_move' THEN
            v_tsq := 1;
        WHEN 'tsq_complete' THEN
            v_tsq := -1;
            v_completed := 1;
        WHEN 'tsq_cancel' THEN
            v_tsq := -1;
            v_canceled := 1;
        WHEN 'tsq_retry' THEN
            v_tsq := -1;
        ELSE
            RAISE EXCEPTION 'sp_update_batch_counters: unknown update type %',
                quote_nullable(p_update_type)
                USING HINT = 'Expected complete, failed, tsq_move, '
                             'tsq_complete, tsq_cancel or tsq_retry.';
    END CASE;

    UPDATE commandbus.batch b
       SET completed_count = b.completed_count + v_completed,
           failed_count = b.failed_count + v_failed,
           in_troubleshooting_count = b.in_troubleshooting_count + v_tsq,
           canceled_count = b.canceled_count + v_canceled
     WHERE b.domain = p_domain
       AND b.batch_id = p_batch_id
    RETURNING b.* INTO v_batch;

    IF v_batch.status IN ('COMPLETED', 'COMPLETED_WITH_FAILURES')
       OR v_batch.completed_count + v_batch.canceled_count
          + v_batch.failed_count <> v_batch.total_count
       OR v_batch.in_troubleshooting_count <> 0 THEN
        RETURN FALSE;
    END IF;

    IF v_batch.canceled_count > 0 OR v_batch.failed_count > 0 THEN
        v_status := 'COMPLETED_WITH_FAILURES';
    ELSE
        v_status := 'COMPLETED';
    END IF;

    UPDATE commandbus.batch b
       SET status = v_status,
           completed_at = NOW()
     WHERE b.domain = p_domain
       AND b.batch_id = p_batch_id;

    INSERT INTO commandbus.audit (domain, command_id, event_type, details_json)
    VALUES (p_domain, p_batch_id, 'BATCH_COMPLETED',
            jsonb_build_object('batch_id', p_batch_id,
                               'total_count', v_batch.total_count,
                               'completed_count', v_batch.completed_count,
                               'canceled_count', v_batch.canceled_count,
                               'failed_count', v_batch.failed_count));

    RETURN TRUE;
END;
$$;

-- -- sp_finish_command ---------------------------------------------------------

-- Moves a command to a final status (COMPLETED, FAILED,
-- IN_TROUBLESHOOTING_QUEUE) and audits p_event_type with p_details:
-- - unknown command: audit only, FALSE;
-- - status already p_status (redelivery, re-finish): audit only, FALSE;
-- - otherwise: status, last_error_* = COALESCE(new, old), updated_at, audit;
--   with p_batch_id, the transition updates the batch counters:
--     IN_PROGRESS              -> COMPLETED                 complete
--     IN_TROUBLESHOOTING_QUEUE -> COMPLETED                 tsq_complete
--     IN_PROGRESS              -> IN_TROUBLESHOOTING_QUEUE  tsq_move
--     IN_PROGRESS              -> FAILED                    failed
--   (any other transition changes no counter) and the function returns
--   whether the batch just became terminal.
CREATE OR REPLACE FUNCTION commandbus.sp_finish_command(
    p_domain     TEXT,
    p_command_id UUID,
    p_status     TEXT,
    p_event_type TEXT,
    p_error_type TEXT  DEFAULT NULL,
    p_error_code TEXT  DEFAULT NULL,
    p_error_msg  TEXT  DEFAULT NULL,
    p_details    JSONB DEFAULT NULL,
    p_batch_id   UUID  DEFAULT NULL
) RETURNS BOOLEAN
LANGUAGE plpgsql
AS $$
DECLARE
    v_old_status  TEXT;
    v_update_type TEXT;
BEGIN
    SELECT c.status
      INTO v_old_status
      FROM commandbus.command c
     WHERE c.domain = p_domain
       AND c.command_id = p_command_id
       FOR UPDATE;

    IF NOT FOUND OR v_old_status = p_status THEN
        INSERT INTO commandbus.audit (domain, command_id, event_type, details_json)
        VALUES (p_domain, p_command_id, p_event_type, p_details);
        RETURN FALSE;
    END IF;

    UPDATE commandbus.command c
       SET status = p_status,
           last_error_type = COALESCE(p_error_type, c.last_error_type),
           last_error_code = COALESCE(p_error_code, c.last_error_code),
           last_error_msg = COALESCE(p_error_msg, c.last_error_msg),
           updated_at = NOW()
     WHERE c.domain = p_domain
       AND c.command_id = p_command_id;

    INSERT INTO commandbus.audit (domain, command_id, event_type, details_json)
    VALUES (p_domain, p_command_id, p_event_type, p_details);

    IF p_batch_id IS NULL THEN
        RETURN FALSE;
    END IF;

    v_update_type := CASE
        WHEN p_status = 'COMPLETED' AND v_old_status = 'IN_PROGRESS'
            THEN 'complete'
        WHEN p_status = 'COMPLETED' AND v_old_status = 'IN_TROUBLESHOOTING_QUEUE'
            THEN 'tsq_complete'
        WHEN p_status = 'IN_TROUBLESHOOTING_QUEUE' AND v_old_status = 'IN_PROGRESS'
            THEN 'tsq_move'
        WHEN p_status = 'FAILED' AND v_old_status = 'IN_PROGRESS'
            THEN 'failed'
    END;

    IF v_update_type IS NULL THEN
        RETURN FALSE;
    END IF;

    RETURN commandbus.sp_update_batch_counters(p_domain, p_batch_id, v_update_type);
END;
$$;

-- -- sp_fail_command -----------------------------------------------------------

-- Records a transient failure (retry pending): last_error_* and updated_at;
-- the status is unchanged. Audits FAILED. FALSE for an unknown command.
CREATE OR REPLACE FUNCTION commandbus.sp_fail_command(
    p_domain       TEXT,
    p_command_id   UUID,
    p_error_type   TEXT,
    p_error_code   TEXT,
    p_error_msg    TEXT,
    p_attempt      INT,
    p_max_attempts INT,
    p_msg_id       BIGINT
) RETURNS BOOLEAN
LANGUAGE plpgsql
AS $$
BEGIN
    UPDATE commandbus.command c
       SET last_error_type = p_error_type,
           last_error_code = p_error_code,
           last_error_msg = p_error_msg,
           updated_at = NOW()
     WHERE c.domain = p_domain
       AND c.command_id = p_command_id;

    IF NOT FOUND THEN
        RETURN FALSE;
    END IF;

    INSERT INTO commandbus.audit (domain, command_id, event_type, details_json)
    VALUES (p_domain, p_command_id, 'FAILED',
            jsonb_build_object('msg_id', p_msg_id,
                               'attempt', p_attempt,
                               'max_attempts', p_max_attempts,
                               'error_type', p_error_type,
                               'error_code', p_error_code,
                               'error_msg', p_error_msg));

    RETURN TRUE;
END;
$$;

-- -- TSQ operator counters -----------------------------------------------------

-- Counter updates for operator actions on a batched command in the TSQ.
-- A NULL batch returns FALSE; otherwise whether the batch just became terminal.

CREATE OR REPLACE FUNCTION commandbus.sp_tsq_complete(
    p_domain   TEXT,
    p_batch_id UUID
) RETURNS BOOLEAN
LANGUAGE plpgsql
AS $$
BEGIN
    IF p_batch_id IS NULL THEN
        RETURN FALSE;
    END IF;
    RETURN commandbus.sp_update_batch_counters(p_domain, p_batch_id, 'tsq_complete');
END;
$$;

CREATE OR REPLACE FUNCTION commandbus.sp_tsq_cancel(
    p_domain   TEXT,
    p_batch_id UUID
) RETURNS BOOLEAN
LANGUAGE plpgsql
AS $$
BEGIN
    IF p_batch_id IS NULL THEN
        RETURN FALSE;
    END IF;
    RETURN commandbus.sp_update_batch_counters(p_domain, p_batch_id, 'tsq_cancel');
END;
$$;

-- The retried command is counted again when it finishes; a retry never
-- completes a batch.
CREATE OR REPLACE FUNCTION commandbus.sp_tsq_retry(
    p_domain   TEXT,
    p_batch_id UUID
) RETURNS BOOLEAN
LANGUAGE plpgsql
AS $$
BEGIN
    IF p_batch_id IS NULL THEN
        RETURN FALSE;
    END IF;
    RETURN commandbus.sp_update_batch_counters(p_domain, p_batch_id, 'tsq_retry');
END;
$$;

-- -- sp_refresh_batch_stats ----------------------------------------------------

-- Recomputes a batch's counters from its rows (canonical V004 form) and
-- returns them. Empty result for a missing batch.
-- COMMAND batch: commands with this batch_id that are COMPLETED, FAILED,
--   CANCELED and IN_TROUBLESHOOTING_QUEUE.
-- PROCESS batch: completed = COMPLETED + COMPENSATED, failed = 0,
--   canceled = FAILED + CANCELED, in_tsq = non-terminal processes with a
--   command (correlation_id = process_id) in the TSQ.
-- Items in the TSQ count as done: is_complete = sum >= total_count, and then
-- the status is COMPLETED_WITH_FAILURES if anything failed, was canceled or is
-- in the TSQ, else COMPLETED (completed_at set once). A PENDING batch with any
-- count > 0 becomes IN_PROGRESS; started_at is set once any count is > 0.
CREATE OR REPLACE FUNCTION commandbus.sp_refresh_batch_stats(
    p_domain   TEXT,
    p_batch_id UUID
) RETURNS TABLE (
    completed_count          BIGINT,
    failed_count             BIGINT,
    canceled_count           BIGINT,
    in_troubleshooting_count BIGINT,
    is_complete              BOOLEAN
)
LANGUAGE plpgsql
AS $$
DECLARE
    v_batch_type  TEXT;
    v_total       INT;
    v_completed   BIGINT;
    v_failed      BIGINT;
    v_canceled    BIGINT;
    v_in_tsq      BIGINT;
    v_any         BOOLEAN;
    v_is_complete BOOLEAN;
BEGIN
    SELECT b.batch_type, b.total_count
      INTO v_batch_type, v_total
      FROM commandbus.batch b
     WHERE b.domain = p_domain
       AND b.batch_id = p_batch_id
       FOR UPDATE;

    IF NOT FOUND THEN
        RETURN;
    END IF;

    IF v_batch_type = 'PROCESS' THEN
        SELECT COUNT(*) FILTER (WHERE p.status IN ('COMPLETED', 'COMPENSATED')),
               0,
               COUNT(*) FILTER (WHERE p.status IN ('FAILED', 'CANCELED')),
               COUNT(*) FILTER (
                   WHERE p.status NOT IN ('COMPLETED', 'COMPENSATED',
                                          'FAILED', 'CANCELED')
                     AND EXISTS (
                         SELECT 1
                           FROM commandbus.command c
                          WHERE c.correlation_id = p.process_id
                            AND c.status = 'IN_TROUBLESHOOTING_QUEUE'))
          INTO v_completed, v_failed, v_canceled, v_in_tsq
          FROM commandbus.process p
         WHERE p.batch_id = p_batch_id;
    ELSE
        SELECT COUNT(*) FILTER (WHERE c.status = 'COMPLETED'),
               COUNT(*) FILTER (WHERE c.status = 'FAILED'),
               COUNT(*) FILTER (WHERE c.status = 'CANCELED'),
               COUNT(*) FILTER (WHERE c.status = 'IN_TROUBLESHOOTING_QUEUE')
          INTO v_completed, v_failed, v_canceled, v_in_tsq
          FROM commandbus.command c
         WHERE c.batch_id = p_batch_id;
    END IF;

    v_any := v_completed + v_failed + v_canceled + v_in_tsq > 0;
    v_is_complete := v_completed + v_failed + v_canceled + v_in_tsq >= v_total;

    UPDATE commandbus.batch b
       SET completed_count = v_completed,
           failed_count = v_failed,
           canceled_count = v_canceled,
           in_troubleshooting_count = v_in_tsq,
           status = CASE
               WHEN v_is_complete
                    AND (v_failed > 0 OR v_canceled > 0 OR v_in_tsq > 0)
                   THEN 'COMPLETED_WITH_FAILURES'
               WHEN v_is_complete
                   THEN 'COMPLETED'
               WHEN b.status = 'PENDING' AND v_any
                   THEN 'IN_PROGRESS'
               ELSE b.status
           END,
           completed_at = CASE
               WHEN v_is_complete AND b.completed_at IS NULL THEN NOW()
               ELSE b.completed_at
           END,
           started_at = CASE
               WHEN b.started_at IS NULL AND v_any THEN NOW()
               ELSE b.started_at
           END
     WHERE b.domain = p_domain
       AND b.batch_id = p_batch_id;

    completed_count := v_completed;
    failed_count := v_failed;
    canceled_count := v_canceled;
    in_troubleshooting_count := v_in_tsq;
    is_complete := v_is_complete;
    RETURN NEXT;
END;
$$;
