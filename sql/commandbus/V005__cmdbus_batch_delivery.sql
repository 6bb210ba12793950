-- Durable delivery of batch-completion callbacks (docs/design.md, "Exact
-- batch counters and callbacks"): the completion callback of a batch runs
-- once when the batch becomes terminal, and again after a crash only if it
-- had not been recorded as delivered.
-- Added beside the reference schema; nothing of the reference changes.
--
-- A worker with callbacks records every batch that becomes terminal through
-- its writes in the same transaction as the transition (INSERT ... ON
-- CONFLICT DO NOTHING). Delivery is claimed with a lease before the
-- callbacks run and marked delivered after they ran:
--   record  -> row (claimed_until NULL, delivered_at NULL)
--   claim   -> claimed_until = now + lease, attempts + 1
--   deliver -> delivered_at set (the row is never claimed again)
-- A worker that dies between claim and mark leaves the lease to expire;
-- any worker with callbacks for the domain then claims the row again in
-- its periodic sweep (at-least-once, never lost).

CREATE TABLE commandbus.cmdbus_batch_delivery (
    domain        TEXT        NOT NULL,
    batch_id      UUID        NOT NULL,
    completed_at  TIMESTAMPTZ NOT NULL DEFAULT NOW(),
    claimed_until TIMESTAMPTZ,
    attempts      INT         NOT NULL DEFAULT 0,
    delivered_at  TIMESTAMPTZ,
    PRIMARY KEY (domain, batch_id)
);

-- The sweep's lookup: a domain's undelivered rows, oldest first.
CREATE INDEX ix_cmdbus_batch_delivery_pending
    ON commandbus.cmdbus_batch_delivery (domain, completed_at)
    WHERE delivered_at IS NULL;

-- Claims undelivered rows of p_domain whose lease is free (never claimed,
-- or expired): with p_batch_ids, only those batches; with NULL, the oldest
-- up to p_limit. Rows locked by a concurrent claim are skipped. Returns the
-- claimed batches (completed_at order) with their attempt number (1 on the
-- first delivery). p_lease_seconds must not be negative (22023).
CREATE FUNCTION commandbus.cmdbus_claim_batch_deliveries(
    p_domain        TEXT,
    p_batch_ids     UUID[],
    p_lease_seconds INT,
    p_limit         INT
) RETURNS TABLE(batch_id UUID, attempts INT)
LANGUAGE plpgsql
AS $$
BEGIN
    IF p_lease_seconds IS NULL OR p_lease_seconds < 0 THEN
        RAISE EXCEPTION 'cmdbus_claim_batch_deliveries: invalid lease %',
            quote_nullable(p_lease_seconds) USING ERRCODE = '22023';
    END IF;
    RETURN QUERY
    WITH picked AS (
        SELECT d.domain, d.batch_id
          FROM commandbus.cmdbus_batch_delivery d
         WHERE d.domain = p_domain
           AND d.delivered_at IS NULL
           AND (d.claimed_until IS NULL OR d.claimed_until <= clock_timestamp())
           AND (p_batch_ids IS NULL OR d.batch_id = ANY(p_batch_ids))
         ORDER BY d.completed_at, d.batch_id
         LIMIT GREATEST(COALESCE(p_limit, 100), 0)
           FOR UPDATE SKIP LOCKED
    ), claimed AS (
        UPDATE commandbus.cmdbus_batch_delivery d
           SET claimed_until = clock_timestamp()
                               + make_interval(secs => p_lease_seconds),
               attempts = d.attempts + 1
          FROM picked
         WHERE d.domain = picked.domain
           AND d.batch_id = picked.batch_id
        RETURNING d.batch_id, d.attempts, d.completed_at
    )
    SELECT c.batch_id, c.attempts
      FROM claimed c
     ORDER BY c.completed_at, c.batch_id;
END;
$$;

-- Marks batches of p_domain as delivered (their callbacks ran). Returns how
-- many rows changed; delivering twice changes nothing the second time.
CREATE FUNCTION commandbus.cmdbus_mark_batches_delivered(
    p_domain    TEXT,
    p_batch_ids UUID[]
) RETURNS INT
LANGUAGE plpgsql
AS $$
DECLARE
    v_count INT;
BEGIN
    UPDATE commandbus.cmdbus_batch_delivery d
       SET delivered_at = clock_timestamp(),
           claimed_until = NULL
     WHERE d.domain = p_domain
       AND d.batch_id = ANY(p_batch_ids)
       AND d.delivered_at IS NULL;
    GET DIAGNOSTICS v_count = ROW_COUNT;
    RETURN v_count;
END;
$$;
