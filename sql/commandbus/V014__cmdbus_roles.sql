-- Least-privilege roles (`cmdbus grant`, docs/operations.md, "Roles").
--
-- `cmdbus grant` gives group roles (a worker, an operator, a reader) the
-- rights their jobs need on the objects of this schema and of pgmq; none of
-- them may create, alter or drop a table. Two jobs need DDL all the same,
-- and this file adds a way to do each without handing out DDL rights:
--
--   cmdbus_create_queue   creates a PGMQ queue as this function's owner
--                         (the role that runs `cmdbus migrate`), so the
--                         queue's tables belong to the schema's owner, never
--                         to the role that asked; the owner's default
--                         privileges (set by `cmdbus grant`) give the group
--                         roles their rights on them. Only the owner and the
--                         roles `cmdbus grant` names may call it.
--   cmdbus_create_priority_index (V010) runs as its owner from now on, so
--                         that a worker connected as the worker role can
--                         create the index of the priority order on a queue
--                         it does not own; callable by the same roles.
--
-- Nothing of the reference's objects or of PGMQ's changes: PGMQ's create
-- functions still run with the caller's rights (an owner or a role with
-- CREATE on schema pgmq may call them as before).

-- -- cmdbus_create_queue ------------------------------------------------------

-- Creates the PGMQ queue p_queue_name unless it exists; returns whether it
-- created it. The name follows PGMQ's rule (1 to 47 letters, digits or
-- underscores; raises 22023 otherwise) and is checked before anything runs.
-- Concurrent creators of one queue are serialised by PGMQ's queue lock.
CREATE FUNCTION commandbus.cmdbus_create_queue(p_queue_name TEXT)
RETURNS BOOLEAN
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $fn$
BEGIN
    IF p_queue_name IS NULL OR p_queue_name !~ '^[A-Za-z0-9_]{1,47}$' THEN
        RAISE EXCEPTION 'invalid queue name %', quote_literal(p_queue_name)
            USING ERRCODE = '22023',
                  HINT = 'A queue name has 1 to 47 letters, digits or underscores.';
    END IF;
    IF EXISTS (SELECT 1 FROM pgmq.meta m WHERE m.queue_name = p_queue_name) THEN
        RETURN FALSE;
    END IF;
    PERFORM pgmq."create"(p_queue_name);
    RETURN TRUE;
END;
$fn$;

REVOKE ALL ON FUNCTION commandbus.cmdbus_create_queue(TEXT) FROM PUBLIC;

-- -- cmdbus_create_priority_index ---------------------------------------------

-- Its body is unchanged (it checks the queue against pgmq.meta and builds
-- one index of a fixed shape); it now runs as its owner, with a search_path
-- that nobody else can put objects in.
ALTER FUNCTION commandbus.cmdbus_create_priority_index(TEXT)
    SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp;

REVOKE ALL ON FUNCTION commandbus.cmdbus_create_priority_index(TEXT) FROM PUBLIC;
