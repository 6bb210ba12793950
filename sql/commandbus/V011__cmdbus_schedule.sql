-- Recurring schedules (docs/scheduling.md, "Recurring schedules"): a row per
-- schedule of a domain, which the workers of that domain fire. A schedule is
-- either a 5-field cron expression evaluated in an IANA time zone, or a fixed
-- interval (slots at anchor + k * interval). next_slot is the earliest slot
-- not fired yet; a worker claims due rows (next_slot <= now(), not paused)
-- with FOR UPDATE SKIP LOCKED, sends the command of the slot through the
-- ordinary send statement with a command id derived from (id, slot) (see
-- commandbus.cmdbus_schedule_slot_ids) and advances next_slot, all in one
-- transaction: a slot fired twice would be a duplicate command id, never a
-- second command. The reference schema is left as it is.

CREATE TABLE commandbus.cmdbus_schedule (
    id              UUID PRIMARY KEY,
    domain          TEXT NOT NULL,
    name            TEXT NOT NULL,
    command_type    TEXT NOT NULL,
    data            JSONB NOT NULL DEFAULT '{}'::jsonb,
    reply_to        TEXT,
    max_attempts    INT,
    priority        INT,
    cron            TEXT,
    time_zone       TEXT,
    interval_ms     BIGINT,
    anchor          TIMESTAMPTZ,
    next_slot       TIMESTAMPTZ NOT NULL,
    paused          BOOLEAN NOT NULL DEFAULT false,
    misfire         TEXT NOT NULL DEFAULT 'run_once',
    created_at      TIMESTAMPTZ NOT NULL DEFAULT now(),
    updated_at      TIMESTAMPTZ NOT NULL DEFAULT now(),
    last_slot       TIMESTAMPTZ,
    last_command_id UUID,
    fired_count     BIGINT NOT NULL DEFAULT 0,
    CONSTRAINT uq_cmdbus_schedule_name UNIQUE (domain, name),
    CONSTRAINT ck_cmdbus_schedule_misfire CHECK (misfire IN ('run_once', 'skip')),
    CONSTRAINT ck_cmdbus_schedule_timing CHECK (
        (cron IS NOT NULL AND time_zone IS NOT NULL AND interval_ms IS NULL
         AND anchor IS NULL)
        OR (cron IS NULL AND time_zone IS NULL AND interval_ms > 0
            AND anchor IS NOT NULL))
);

-- The due schedules of a domain, earliest first (the claim and the
-- scheduler's "when is the next slot" query).
CREATE INDEX ix_cmdbus_schedule_due
    ON commandbus.cmdbus_schedule (domain, next_slot) WHERE NOT paused;

-- The command id and correlation id of slot `p_slot` of schedule `p_id`:
-- md5-based UUIDs of the schedule's id and the slot as microseconds since
-- the epoch, so that every worker derives the same ids for the same slot.
-- `exists` says whether the domain has a command with that id already (a
-- slot fired before by some path): the firing then only advances.
CREATE FUNCTION commandbus.cmdbus_schedule_slot_ids(
    p_domain TEXT,
    p_id     UUID,
    p_slot   TIMESTAMPTZ
) RETURNS TABLE(command_id UUID, correlation_id UUID, already_sent BOOLEAN)
LANGUAGE sql STABLE
AS $$
    WITH k AS (
        SELECT p_id::text || ':'
               || (extract(epoch FROM p_slot) * 1000000)::bigint::text AS key
    ), ids AS (
        SELECT md5('cmdbus:schedule:' || k.key)::uuid AS command_id,
               md5('cmdbus:schedule-correlation:' || k.key)::uuid AS correlation_id
          FROM k
    )
    SELECT ids.command_id, ids.correlation_id,
           EXISTS (SELECT 1 FROM commandbus.command c
                    WHERE c.domain = p_domain AND c.command_id = ids.command_id)
      FROM ids
$$;
