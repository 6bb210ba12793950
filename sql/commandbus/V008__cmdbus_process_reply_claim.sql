-- Process replies read by ownership: a process manager reads from a process
-- reply queue only the replies it may apply, and leaves every other message
-- exactly as it found it (no read_ct increment, no new visibility timeout,
-- no lock, no archive), so that other process managers on the same queue
-- (other process types, other domains, the reference library's manager, a
-- worker of an older or newer deployment) get their replies untouched.
-- Added beside the reference's objects; nothing of them changes.
--
-- A message is claimed when, by its correlation id (the process it answers):
--   1. it belongs to a process of the reader's domain whose process_type is
--      one of the reader's types ("ours"); or
--   2. no process manager can apply it ("nobody's"): its correlation_id is
--      absent, JSON null, not a string, or empty; or it is a UUID naming no
--      process in any domain of this database. Every process row is
--      committed before any reply to it can exist (the process and its first
--      command are inserted in one transaction, and a reply is written only
--      after its command was read), and a process row that is gone does not
--      come back, so such a message can never apply, whoever reads it. The
--      reader archives it (the reference library deletes it).
-- Every other message is left alone: one whose process is of another type
-- or in another domain, and one whose correlation_id is a string that is
-- not a UUID in the canonical 8-4-4-4-12 form (another library might read
-- it; cmdbus does not).
--
-- Plan: the queue is walked in msg_id order (its primary key) over the
-- visible messages, as pgmq.read does; each candidate costs one probe of
-- ix_cmdbus_process_id (below) and the heap row it finds. Only the messages
-- claimed are locked (FOR UPDATE SKIP LOCKED sits above the filter), so
-- concurrent readers of any library never wait for each other and never
-- claim a message twice. A backlog of other managers' replies is walked on
-- every read: give process types with a lot of traffic a reply queue of
-- their own (docs/processes.md).

-- The process of a reply by its id alone: the primary key leads with the
-- domain, and a reply may name a process of another domain.
CREATE INDEX IF NOT EXISTS ix_cmdbus_process_id
    ON commandbus.process (process_id);

-- Claims up to p_qty visible messages of p_queue_name that the process
-- manager of p_domain serving p_process_types may apply (see the top of
-- this file): sets their visibility timeout to now + p_vt seconds and
-- increments their read_ct, as pgmq.read does. Returns them in msg_id order
-- with their read_ct after the increment.
CREATE FUNCTION commandbus.cmdbus_claim_process_replies(
    p_queue_name    TEXT,
    p_domain        TEXT,
    p_process_types TEXT[],
    p_vt            INTEGER,
    p_qty           INTEGER
) RETURNS TABLE (msg_id BIGINT, read_ct INTEGER, message JSONB)
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
            WHERE q.vt <= $5
              AND CASE
                    WHEN jsonb_typeof(q.message -> ''correlation_id'')
                           IS DISTINCT FROM ''string''
                         OR q.message ->> ''correlation_id'' = ''''
                      THEN TRUE
                    WHEN q.message ->> ''correlation_id'' !~* ''^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$''
                      THEN FALSE
                    ELSE COALESCE(
                      (SELECT bool_or(p.domain = $1
                                      AND p.process_type = ANY ($2))
                         FROM commandbus.process p
                        WHERE p.process_id
                              = (q.message ->> ''correlation_id'')::uuid),
                      TRUE)
                  END
            ORDER BY q.msg_id
            LIMIT $3
              FOR UPDATE SKIP LOCKED
         ), claimed AS (
           UPDATE pgmq.%1$I m
              SET vt = clock_timestamp() + make_interval(secs => $4),
                  read_ct = m.read_ct + 1
             FROM picked
            WHERE m.msg_id = picked.msg_id
           RETURNING m.msg_id, m.read_ct, m.message
         )
         SELECT c.msg_id, c.read_ct, c.message FROM claimed c ORDER BY c.msg_id',
        pgmq.format_table_name(p_queue_name, 'q'))
    USING p_domain, COALESCE(p_process_types, '{}'::TEXT[]), p_qty, p_vt,
          clock_timestamp();
END;
$fn$;
