-- cmdbus: partitioned queues for the PGMQ-compatible install, with pg_partman
-- (4.x or 5.x). Replaces the refusing pgmq.create_partitioned of V001 (same
-- signature and defaults) and pgmq.drop_queue (same signature), following
-- PGMQ's documented behaviour:
--
--   - the queue table q_<n> and the archive a_<n> are range-partitioned
--     parents with PGMQ's columns; a number as partition_interval partitions
--     both by msg_id (that many ids per partition), anything else is an
--     interval of time and partitions the queue by enqueued_at and the
--     archive by archived_at;
--   - neither parent has a primary key (a key of a partitioned table would
--     have to hold the partition column): msg_id stays unique because it
--     comes from the queue table's identity;
--   - both parents are registered with pg_partman's create_parent, with the
--     retention (retention_interval: ids or time, as partition_interval)
--     in pg_partman's part_config, retention_keep_table = false;
--   - the meta row says is_partitioned = true.
--
-- Indexes beyond PGMQ's: q_<n>_vt_idx (vt, as for a plain queue: every read
-- filters on it), q_<n>_msg_id_idx and a_<n>_msg_id_idx (msg_id, which a
-- plain queue has as its key) when msg_id is not already the partition
-- column that PGMQ indexes.
--
-- pg_partman creates partitions only when its maintenance runs
-- (docs/operations.md, "Partitioned queues", says what cmdbus runs and
-- why it takes the retention out of part_config for the queues it
-- creates). Nothing here creates the pg_partman extension.

CREATE OR REPLACE FUNCTION pgmq.create_partitioned(
  queue_name text,
  partition_interval text DEFAULT '10000',
  retention_interval text DEFAULT '100000'
)
RETURNS void
LANGUAGE plpgsql
AS $fn$
DECLARE
  qtable text := pgmq.format_table_name(queue_name, 'q');
  atable text := pgmq.format_table_name(queue_name, 'a');
  partman text;
  part_type text;
  qcol text;
  acol text;
  existing boolean;
BEGIN
  PERFORM pgmq.validate_queue_name(queue_name);
  PERFORM pgmq.acquire_queue_lock(queue_name);
  PERFORM pgmq._ensure_pg_partman_installed();
  partman := pgmq._get_pg_partman_schema();
  part_type := CASE WHEN pgmq._get_pg_partman_major_version() >= 5
                    THEN 'range' ELSE 'native' END;
  qcol := pgmq._get_partition_col(partition_interval);
  acol := CASE WHEN qcol = 'enqueued_at' THEN 'archived_at' ELSE qcol END;

  SELECT m.is_partitioned INTO existing
  FROM pgmq.meta m
  WHERE m.queue_name = create_partitioned.queue_name;
  IF existing THEN
    RETURN;
  ELSIF existing IS NOT NULL THEN
    RAISE EXCEPTION 'queue % exists and is not partitioned', queue_name
      USING ERRCODE = 'object_not_in_prerequisite_state',
            HINT = 'A queue cannot be converted; create the partitioned queue under another name.';
  END IF;

  EXECUTE pg_catalog.format(
    'CREATE TABLE pgmq.%I (
       msg_id      bigint GENERATED ALWAYS AS IDENTITY,
       read_ct     integer NOT NULL DEFAULT 0,
       enqueued_at timestamptz NOT NULL DEFAULT now(),
       vt          timestamptz NOT NULL,
       message     jsonb,
       headers     jsonb
     ) PARTITION BY RANGE (%I)',
    qtable, qcol);

  EXECUTE pg_catalog.format(
    'CREATE TABLE pgmq.%I (
       msg_id      bigint NOT NULL,
       read_ct     integer NOT NULL DEFAULT 0,
       enqueued_at timestamptz NOT NULL DEFAULT now(),
       archived_at timestamptz NOT NULL DEFAULT now(),
       vt          timestamptz NOT NULL,
       message     jsonb,
       headers     jsonb
     ) PARTITION BY RANGE (%I)',
    atable, acol);

  -- Only when this script runs as the body of an extension named pgmq.
  IF pgmq._extension_exists('pgmq') THEN
    EXECUTE pg_catalog.format('ALTER EXTENSION pgmq ADD TABLE pgmq.%I', qtable);
    EXECUTE pg_catalog.format('ALTER EXTENSION pgmq ADD SEQUENCE pgmq.%I', qtable || '_msg_id_seq');
    EXECUTE pg_catalog.format('ALTER EXTENSION pgmq ADD TABLE pgmq.%I', atable);
  END IF;

  -- Indexes on the parents before the partitions exist: every partition
  -- pg_partman attaches gets them.
  EXECUTE pg_catalog.format('CREATE INDEX %I ON pgmq.%I (%I)',
                            qtable || '_part_idx', qtable, qcol);
  EXECUTE pg_catalog.format('CREATE INDEX %I ON pgmq.%I (vt ASC)',
                            qtable || '_vt_idx', qtable);
  EXECUTE pg_catalog.format('CREATE INDEX %I ON pgmq.%I (archived_at)',
                            'archived_at_idx_' || queue_name, atable);
  IF qcol <> 'msg_id' THEN
    EXECUTE pg_catalog.format('CREATE INDEX %I ON pgmq.%I (msg_id)',
                              qtable || '_msg_id_idx', qtable);
    EXECUTE pg_catalog.format('CREATE INDEX %I ON pgmq.%I (msg_id)',
                              atable || '_msg_id_idx', atable);
  END IF;

  EXECUTE pg_catalog.format(
    'SELECT %I.create_parent(p_parent_table := $1, p_control := $2,
                             p_interval := $3, p_type := $4)',
    partman)
  USING 'pgmq.' || qtable, qcol, partition_interval, part_type;
  EXECUTE pg_catalog.format(
    'SELECT %I.create_parent(p_parent_table := $1, p_control := $2,
                             p_interval := $3, p_type := $4)',
    partman)
  USING 'pgmq.' || atable, acol, partition_interval, part_type;

  EXECUTE pg_catalog.format(
    'UPDATE %I.part_config
        SET retention = $1,
            retention_keep_table = false,
            retention_keep_index = true,
            automatic_maintenance = ''on''
      WHERE parent_table IN ($2, $3)',
    partman)
  USING retention_interval, 'pgmq.' || qtable, 'pgmq.' || atable;

  INSERT INTO pgmq.meta (queue_name, is_partitioned, is_unlogged)
  VALUES (create_partitioned.queue_name, true, false);
END;
$fn$;

-- As in V001, and for a partitioned queue also pg_partman's configuration
-- of its two parents and the template tables pg_partman 4.x made for them.
CREATE OR REPLACE FUNCTION pgmq.drop_queue(queue_name text)
RETURNS boolean
LANGUAGE plpgsql
AS $fn$
DECLARE
  qtable text := pgmq.format_table_name(queue_name, 'q');
  atable text := pgmq.format_table_name(queue_name, 'a');
  partitioned boolean;
  partman_schema text;
  template text;
BEGIN
  PERFORM pgmq.acquire_queue_lock(queue_name);

  SELECT m.is_partitioned INTO partitioned
  FROM pgmq.meta m
  WHERE m.queue_name = drop_queue.queue_name;

  IF NOT EXISTS (SELECT 1 FROM information_schema.tables t
                 WHERE t.table_schema = 'pgmq' AND t.table_name = qtable) THEN
    RAISE NOTICE 'pgmq queue `%` does not exist', queue_name;
    RETURN false;
  END IF;

  -- Only when this script runs as the body of an extension named pgmq.
  IF pgmq._extension_exists('pgmq') THEN
    IF pgmq._belongs_to_pgmq(qtable) THEN
      EXECUTE pg_catalog.format('ALTER EXTENSION pgmq DROP TABLE pgmq.%I', qtable);
    END IF;
    IF pgmq._belongs_to_pgmq(qtable || '_msg_id_seq') THEN
      EXECUTE pg_catalog.format('ALTER EXTENSION pgmq DROP SEQUENCE pgmq.%I', qtable || '_msg_id_seq');
    END IF;
    IF pgmq._belongs_to_pgmq(atable) THEN
      EXECUTE pg_catalog.format('ALTER EXTENSION pgmq DROP TABLE pgmq.%I', atable);
    END IF;
  END IF;

  EXECUTE pg_catalog.format('DROP TABLE IF EXISTS pgmq.%I', qtable);
  EXECUTE pg_catalog.format('DROP TABLE IF EXISTS pgmq.%I', atable);

  DELETE FROM pgmq.meta m WHERE m.queue_name = drop_queue.queue_name;

  IF partitioned THEN
    partman_schema := pgmq._get_pg_partman_schema();
    IF partman_schema IS NOT NULL THEN
      -- template_table exists in pg_partman 4.x and 5.x; it is NULL when
      -- pg_partman made none.
      FOR template IN EXECUTE pg_catalog.format(
          'SELECT c.template_table FROM %I.part_config c
            WHERE c.parent_table IN ($1, $2) AND c.template_table IS NOT NULL',
          partman_schema)
        USING 'pgmq.' || qtable, 'pgmq.' || atable
      LOOP
        IF pg_catalog.to_regclass(template) IS NOT NULL THEN
          EXECUTE pg_catalog.format('DROP TABLE %s', pg_catalog.to_regclass(template));
        END IF;
      END LOOP;
      EXECUTE pg_catalog.format('DELETE FROM %I.part_config WHERE parent_table IN ($1, $2)',
                                partman_schema)
        USING 'pgmq.' || qtable, 'pgmq.' || atable;
    END IF;
  END IF;

  RETURN true;
END;
$fn$;
