-- Batch-callback delivery (V005) names who claimed a delivery, so that a
-- claim whose answer was lost can be taken again by the same claimer.
--
-- A worker's batch counter claims a recorded completion with a lease, runs
-- the callbacks and marks it delivered. When the connection drops after the
-- claim committed but before its answer arrived, the counter cannot know
-- that it holds the lease: claimed by nobody it knows, the batch would wait
-- for the lease to expire (a minute by default) and the next sweep. With a
-- claimer token (one per worker process), the counter's retry takes its own
-- claims again at once; other processes still skip them until the lease
-- expires. Claims without a token behave as V005's.

ALTER TABLE commandbus.cmdbus_batch_delivery ADD COLUMN claimed_by UUID;

-- As cmdbus_claim_batch_deliveries of V005, plus p_claimer: rows claimed by
-- p_claimer are taken again whatever their lease, and every claimed row
-- records p_claimer as its claimer (NULL: none, V005's behaviour).
CREATE FUNCTION commandbus.cmdbus_claim_batch_deliveries(
    p_domain        TEXT,
    p_batch_ids     UUID[],
    p_lease_seconds INT,
    p_limit         INT,
    p_claimer       UUID
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
           AND (d.claimed_until IS NULL OR d.claimed_until <= clock_timestamp()
                OR (p_claimer IS NOT NULL AND d.claimed_by = p_claimer))
           AND (p_batch_ids IS NULL OR d.batch_id = ANY(p_batch_ids))
         ORDER BY d.completed_at, d.batch_id
         LIMIT GREATEST(COALESCE(p_limit, 100), 0)
           FOR UPDATE SKIP LOCKED
    ), claimed AS (
        UPDATE commandbus.cmdbus_batch_delivery d
           SET claimed_until = clock_timestamp()
                               + make_interval(secs => p_lease_seconds),
               claimed_by = p_claimer,
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
