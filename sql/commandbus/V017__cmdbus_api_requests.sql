-- The command API's request fingerprints (docs/api.md, "Idempotency";
-- docs/database.md): what a POST with a client's command_id decided, kept
-- beside the command so that a repeat of that id is compared with the
-- request that created it, whatever became of the command since (a
-- completed command's message, which held its data and priority, is
-- deleted). Added beside the reference schema; nothing of it changes, and
-- the command table gets no foreign key (the reference's own deletes of
-- commands must not depend on this table).
--
-- A row is written in the transaction that sends its command (for each
-- command of a batch POST too), only when the client chose the id:
-- commands sent by the library, the CLI or the reference library have no
-- row, and the API compares a repeat of their ids with the command as it
-- was before (api/idempotency.cpp). Retention removes a row with its
-- command (cmdbus_prune_commands below).

CREATE TABLE commandbus.cmdbus_api_request (
    domain      TEXT NOT NULL,
    command_id  UUID NOT NULL,
    -- cmdbus_api_fingerprint of what the request decided.
    fingerprint BYTEA NOT NULL,
    created_at  TIMESTAMPTZ NOT NULL DEFAULT now(),
    PRIMARY KEY (domain, command_id)
);

-- The fingerprint of a request: SHA-256 of what it decided (a JSON object
-- the API builds: each field as given) in jsonb's text form, so that the
-- order of keys and the white space of the client's JSON do not count
-- (numbers keep their written scale: 1.0 and 1.00 differ; jsonb writes 1e2
-- as 100).
CREATE FUNCTION commandbus.cmdbus_api_fingerprint(p_decided JSONB)
RETURNS BYTEA
LANGUAGE sql IMMUTABLE STRICT
AS $$ SELECT sha256(convert_to(p_decided::text, 'UTF8')) $$;

-- -- retention ---------------------------------------------------------------

-- cmdbus_prune_commands (V013) removes a command's fingerprint with it and
-- counts the fingerprints in a third column. Its result type changes, so
-- it is dropped and created anew (EXECUTE stays with PUBLIC, as before).
DROP FUNCTION commandbus.cmdbus_prune_commands(TEXT, INTERVAL, INT);

CREATE FUNCTION commandbus.cmdbus_prune_commands(
    p_domain TEXT,
    p_age    INTERVAL,
    p_limit  INT
) RETURNS TABLE(commands BIGINT, audits BIGINT, api_requests BIGINT)
LANGUAGE plpgsql
AS $$
DECLARE
    v_before TIMESTAMPTZ;
BEGIN
    PERFORM commandbus.cmdbus_prune_check('cmdbus_prune_commands', p_age,
                                          p_limit);
    v_before := clock_timestamp() - p_age;
    RETURN QUERY
    WITH victims AS (
        SELECT c.domain, c.command_id
          FROM commandbus.command c
         WHERE c.updated_at < v_before
           AND (p_domain IS NULL OR c.domain = p_domain)
           AND commandbus.cmdbus_command_final(c.status)
           AND NOT commandbus.cmdbus_command_held(c.domain, c.command_id,
                                                  c.correlation_id, c.batch_id)
         ORDER BY c.updated_at
         LIMIT p_limit
           FOR UPDATE OF c SKIP LOCKED
    ), gone_audits AS (
        DELETE FROM commandbus.audit a
         USING victims v
         WHERE a.command_id = v.command_id
           AND a.domain = v.domain
        RETURNING 1
    ), gone_requests AS (
        DELETE FROM commandbus.cmdbus_api_request r
         USING victims v
         WHERE r.domain = v.domain
           AND r.command_id = v.command_id
        RETURNING 1
    ), gone AS (
        DELETE FROM commandbus.command c
         USING victims v
         WHERE c.domain = v.domain
           AND c.command_id = v.command_id
        RETURNING 1
    )
    SELECT (SELECT count(*) FROM gone), (SELECT count(*) FROM gone_audits),
           (SELECT count(*) FROM gone_requests);
END;
$$;

-- cmdbus_prune_preview (V013), as before, with one more kind:
-- api_requests, the fingerprints of the commands a prune would remove.
CREATE OR REPLACE FUNCTION commandbus.cmdbus_prune_preview(
    p_domain      TEXT,
    p_command_age INTERVAL,
    p_process_age INTERVAL,
    p_batch_age   INTERVAL,
    p_archive_age INTERVAL
) RETURNS TABLE(kind TEXT, n BIGINT)
LANGUAGE plpgsql STABLE
AS $$
DECLARE
    v_now      TIMESTAMPTZ := clock_timestamp();
    v_commands BIGINT := 0;
    v_caudits  BIGINT := 0;
    v_procs    BIGINT := 0;
    v_paudits  BIGINT := 0;
    v_batches  BIGINT := 0;
    v_baudits  BIGINT := 0;
    v_archived BIGINT := 0;
    v_requests BIGINT := 0;
    v_n        BIGINT;
    v_queue    TEXT;
BEGIN
    IF p_command_age IS NOT NULL THEN
        SELECT count(*), COALESCE(sum(
                   (SELECT count(*) FROM commandbus.audit a
                     WHERE a.command_id = c.command_id
                       AND a.domain = c.domain)), 0),
               count(*) FILTER (WHERE EXISTS (
                   SELECT 1 FROM commandbus.cmdbus_api_request r
                    WHERE r.domain = c.domain
                      AND r.command_id = c.command_id))
          INTO v_commands, v_caudits, v_requests
          FROM commandbus.command c
         WHERE c.updated_at < v_now - p_command_age
           AND (p_domain IS NULL OR c.domain = p_domain)
           AND commandbus.cmdbus_command_final(c.status)
           AND NOT commandbus.cmdbus_command_held(c.domain, c.command_id,
                                                  c.correlation_id, c.batch_id);
    END IF;
    IF p_process_age IS NOT NULL THEN
        SELECT count(*), COALESCE(sum(
                   (SELECT count(*) FROM commandbus.process_audit pa
                     WHERE pa.domain = p.domain
                       AND pa.process_id = p.process_id)), 0)
          INTO v_procs, v_paudits
          FROM commandbus.process p
         WHERE p.updated_at < v_now - p_process_age
           AND (p_domain IS NULL OR p.domain = p_domain)
           AND commandbus.cmdbus_process_final(p.status)
           AND NOT commandbus.cmdbus_process_held(p.domain, p.batch_id);
    END IF;
    IF p_batch_age IS NOT NULL THEN
        SELECT count(*), COALESCE(sum(
                   (SELECT count(*) FROM commandbus.audit a
                     WHERE a.command_id = b.batch_id
                       AND a.domain = b.domain)), 0)
          INTO v_batches, v_baudits
          FROM commandbus.batch b
         WHERE (p_domain IS NULL OR b.domain = p_domain)
           AND commandbus.cmdbus_batch_final(b.status)
           AND COALESCE(b.completed_at, b.created_at) < v_now - p_batch_age
           AND NOT EXISTS (
                   SELECT 1 FROM commandbus.command c
                    WHERE c.domain = b.domain AND c.batch_id = b.batch_id
                      AND NOT (p_command_age IS NOT NULL
                               AND c.updated_at < v_now - p_command_age
                               AND commandbus.cmdbus_command_final(c.status)
                               AND NOT commandbus.cmdbus_command_held(
                                   c.domain, c.command_id, c.correlation_id,
                                   c.batch_id)))
           AND NOT EXISTS (
                   SELECT 1 FROM commandbus.process p
                    WHERE p.batch_id = b.batch_id
                      AND NOT (p_process_age IS NOT NULL
                               AND p.updated_at < v_now - p_process_age
                               AND commandbus.cmdbus_process_final(p.status)
                               AND NOT commandbus.cmdbus_process_held(
                                   p.domain, p.batch_id)))
           AND NOT EXISTS (SELECT 1 FROM commandbus.cmdbus_batch_delivery d
                            WHERE d.domain = b.domain
                              AND d.batch_id = b.batch_id
                              AND d.delivered_at IS NULL);
    END IF;
    IF p_archive_age IS NOT NULL THEN
        FOR v_queue IN SELECT q FROM commandbus.cmdbus_prune_queues(p_domain) q
        LOOP
            EXECUTE format('SELECT count(*) FROM (%s) x',
                           commandbus.cmdbus_archive_prunable_sql(v_queue))
               INTO v_n
              USING v_now - p_archive_age;
            v_archived := v_archived + v_n;
        END LOOP;
    END IF;
    RETURN QUERY
    SELECT v.k, v.c
      FROM (VALUES ('commands', v_commands), ('command_audits', v_caudits),
                   ('processes', v_procs), ('process_audits', v_paudits),
                   ('batches', v_batches), ('batch_audits', v_baudits),
                   ('archived_messages', v_archived),
                   ('api_requests', v_requests)) AS v(k, c);
END;
$$;
