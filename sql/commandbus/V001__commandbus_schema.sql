CREATE SCHEMA IF NOT EXISTS commandbus;

-- commandbus schema: the canonical tables of the reference (the complete
-- schema of its CI migration set, see docs/design.md, "Reference schema kept
-- whole"), with the same columns, types, defaults and index names, so that
-- reference clients and workers run against it unchanged.
--
-- Run once by the migration runner inside its transaction. Everything is
-- schema-qualified; nothing here depends on search_path or on pgmq.

-- -- batch ---------------------------------------------------------------------

-- A group of commands (batch_type COMMAND) or processes (batch_type PROCESS).
-- The counters are maintained by sp_update_batch_counters (inline) and
-- recomputed by sp_refresh_batch_stats (repair/report path).
CREATE TABLE IF NOT EXISTS commandbus.batch (
    domain                   TEXT        NOT NULL,
    batch_id                 UUID        NOT NULL,
    name                     TEXT,
    custom_data              JSONB,
    status                   TEXT        NOT NULL DEFAULT 'PENDING',
    total_count              INT         NOT NULL DEFAULT 0,
    completed_count          INT         NOT NULL DEFAULT 0,
    canceled_count           INT         NOT NULL DEFAULT 0,
    in_troubleshooting_count INT         NOT NULL DEFAULT 0,
    created_at               TIMESTAMPTZ NOT NULL DEFAULT NOW(),
    started_at               TIMESTAMPTZ,
    completed_at             TIMESTAMPTZ,
    batch_type               TEXT        NOT NULL DEFAULT 'COMMAND',
    failed_count             INT         NOT NULL DEFAULT 0,
    PRIMARY KEY (domain, batch_id)
);

CREATE INDEX IF NOT EXISTS ix_batch_status
    ON commandbus.batch (domain, status);

CREATE INDEX IF NOT EXISTS ix_batch_created
    ON commandbus.batch (domain, created_at DESC);

-- -- command -------------------------------------------------------------------

-- One row per command sent. There is no primary key: the unique index
-- uq_command_domain_cmdid is the identity. There is no FK to batch.
CREATE TABLE IF NOT EXISTS commandbus.command (
    domain           TEXT        NOT NULL,
    queue_name       TEXT        NOT NULL,
    msg_id           BIGINT,
    command_id       UUID        NOT NULL,
    command_type     TEXT        NOT NULL,
    status           TEXT        NOT NULL,
    attempts         INT         NOT NULL DEFAULT 0,
    max_attempts     INT         NOT NULL,
    lease_expires_at TIMESTAMPTZ,
    last_error_type  TEXT,
    last_error_code  TEXT,
    last_error_msg   TEXT,
    created_at       TIMESTAMPTZ NOT NULL DEFAULT NOW(),
    updated_at       TIMESTAMPTZ NOT NULL DEFAULT NOW(),
    reply_queue      TEXT        NOT NULL DEFAULT '',
    correlation_id   UUID,
    batch_id         UUID
);

CREATE UNIQUE INDEX IF NOT EXISTS uq_command_domain_cmdid
    ON commandbus.command (domain, command_id);

CREATE INDEX IF NOT EXISTS ix_command_status_type
    ON commandbus.command (status, command_type);

CREATE INDEX IF NOT EXISTS ix_command_status_created
    ON commandbus.command (status, created_at DESC);

CREATE INDEX IF NOT EXISTS ix_command_updated
    ON commandbus.command (updated_at);

CREATE INDEX IF NOT EXISTS ix_command_batch
    ON commandbus.command (domain, batch_id)
    WHERE batch_id IS NOT NULL;

CREATE INDEX IF NOT EXISTS ix_command_batch_status
    ON commandbus.command (batch_id, status)
    WHERE batch_id IS NOT NULL;

-- -- audit ---------------------------------------------------------------------

-- Append-only event log. For BATCH_* events, command_id holds the batch_id.
-- Trails are read ordered by (ts, audit_id) (docs/design.md, "Audit order").
CREATE TABLE IF NOT EXISTS commandbus.audit (
    audit_id     BIGSERIAL   PRIMARY KEY,
    domain       TEXT        NOT NULL,
    command_id   UUID        NOT NULL,
    event_type   TEXT        NOT NULL,
    ts           TIMESTAMPTZ NOT NULL DEFAULT NOW(),
    details_json JSONB
);

CREATE INDEX IF NOT EXISTS ix_audit_cmdid_ts
    ON commandbus.audit (command_id, ts);

-- -- payload_archive -------------------------------------------------------------

-- Kept for schema compatibility; the reference never reads or writes it.
CREATE TABLE IF NOT EXISTS commandbus.payload_archive (
    domain       TEXT        NOT NULL,
    command_id   UUID        NOT NULL,
    payload_json JSONB       NOT NULL,
    archived_at  TIMESTAMPTZ NOT NULL DEFAULT NOW(),
    PRIMARY KEY (domain, command_id)
);

-- -- process -------------------------------------------------------------------

-- A process manager (saga) instance. Status strings as the reference stores
-- them, e.g. 'WAITING' for "waiting for reply" (docs/design.md, "Status
-- strings").
CREATE TABLE IF NOT EXISTS commandbus.process (
    domain        VARCHAR(255) NOT NULL,
    process_id    UUID         NOT NULL,
    process_type  VARCHAR(255) NOT NULL,
    status        VARCHAR(50)  NOT NULL DEFAULT 'PENDING',
    current_step  VARCHAR(255),
    state         JSONB        NOT NULL DEFAULT '{}',
    error_code    VARCHAR(255),
    error_message TEXT,
    created_at    TIMESTAMPTZ  NOT NULL DEFAULT NOW(),
    updated_at    TIMESTAMPTZ  NOT NULL DEFAULT NOW(),
    completed_at  TIMESTAMPTZ,
    batch_id      UUID,
    PRIMARY KEY (domain, process_id)
);

CREATE INDEX IF NOT EXISTS idx_process_type
    ON commandbus.process (domain, process_type);

CREATE INDEX IF NOT EXISTS idx_process_status
    ON commandbus.process (domain, status);

CREATE INDEX IF NOT EXISTS idx_process_created
    ON commandbus.process (created_at);

CREATE INDEX IF NOT EXISTS ix_process_batch_id
    ON commandbus.process (batch_id)
    WHERE batch_id IS NOT NULL;

CREATE INDEX IF NOT EXISTS ix_process_batch_status
    ON commandbus.process (batch_id, status)
    WHERE batch_id IS NOT NULL;

-- -- process_audit -------------------------------------------------------------

-- One row per command sent by a process step; the reply fields are filled in
-- when the reply arrives.
CREATE TABLE IF NOT EXISTS commandbus.process_audit (
    id            BIGSERIAL    PRIMARY KEY,
    domain        VARCHAR(255) NOT NULL,
    process_id    UUID         NOT NULL,
    step_name     VARCHAR(255) NOT NULL,
    command_id    UUID         NOT NULL,
    command_type  VARCHAR(255) NOT NULL,
    command_data  JSONB,
    sent_at       TIMESTAMPTZ  NOT NULL,
    reply_outcome VARCHAR(50),
    reply_data    JSONB,
    received_at   TIMESTAMPTZ,
    FOREIGN KEY (domain, process_id)
        REFERENCES commandbus.process (domain, process_id)
);

CREATE INDEX IF NOT EXISTS idx_process_audit_process
    ON commandbus.process_audit (domain, process_id);

CREATE INDEX IF NOT EXISTS idx_process_audit_command
    ON commandbus.process_audit (command_id);
