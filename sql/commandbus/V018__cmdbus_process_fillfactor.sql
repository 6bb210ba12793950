-- Room on each page of the process tables for the next version of a row
-- (docs/performance.md, "Process managers"), so that the updates a step
-- makes can be HOT updates: the new version stays on the row's page and no
-- index gets a new entry.
--
-- Every step updates its process row (state, current step, updated_at; the
-- status usually stays WAITING_FOR_REPLY) and records the reply in its
-- process_audit row (reply_outcome, reply_data, received_at). None of those
-- columns is indexed unless the status changes, so the only thing that kept
-- these updates from being HOT was a full page: with the default fillfactor
-- of 100, inserts fill every page, and each update wrote its new version
-- elsewhere and a new entry into every index of the table (four on process,
-- three on process_audit).
--
-- Half of each page: a page filled by inserts then holds one new version of
-- each of its rows, so that even a group of replies for processes started
-- together (their rows side by side) is updated in place before a later
-- access prunes the old versions. 70 left room for fewer than half of them
-- (measured: docs/performance.md). The tables grow to about twice their
-- packed size, which for one row per process and one per step is little.
--
-- A storage parameter only: no column, index, constraint or procedure of
-- the reference schema changes, and every client reads and writes the rows
-- as before. Pages written before this migration keep their rows where they
-- are; the parameter applies to pages filled from now on (a VACUUM FULL or
-- pg_repack rewrites older ones, never needed for correctness).

ALTER TABLE commandbus.process SET (fillfactor = 50);
ALTER TABLE commandbus.process_audit SET (fillfactor = 50);
