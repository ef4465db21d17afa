-- The chaos run's I9 evidence (chaos/flows.py): what really happened to the
-- jobs that wait, recorded apart from tether's own bookkeeping.
-- {starts}: one row each time a waiter's handler began (written first thing,
--   on a connection of its own, autocommitted: a zombie's start lands too),
--   with the dependencies' states it read (ctx.upstream_states, JSON).
-- {moves}: one row per change of a job's state into or out of 'waiting',
--   written by a trigger on the jobs table in the transaction that made it,
--   with that moment's clock: the release (or the cancellation a failed
--   dependency causes) as the database made it, and how many times.
-- On PostgreSQL both live in the run's own schema (dropped at the end); on
-- SQLite their tether_ prefix has them dropped with tether's tables (and the
-- trigger with tether_jobs).

-- name: starts_postgresql
CREATE TABLE IF NOT EXISTS {starts} (
    job_id     bigint      NOT NULL,
    attempt    int         NOT NULL,
    worker     text        NOT NULL,
    started_at timestamptz NOT NULL DEFAULT now(),
    seen       text
)

-- name: moves_postgresql
CREATE TABLE IF NOT EXISTS {moves} (
    job_id    bigint      NOT NULL,
    old_state text        NOT NULL,
    state     text        NOT NULL,
    at        timestamptz NOT NULL DEFAULT clock_timestamp()
)

-- name: function_postgresql
CREATE OR REPLACE FUNCTION {function}() RETURNS trigger LANGUAGE plpgsql AS $fn$
BEGIN
    INSERT INTO {moves} (job_id, old_state, state) VALUES (NEW.id, OLD.state, NEW.state);
    RETURN NULL;
END
$fn$

-- name: trigger_postgresql
-- Row-level, and only for an UPDATE whose SET names state and whose rows
-- enter or leave 'waiting': every other update of jobs pays the WHEN test alone.
CREATE OR REPLACE TRIGGER tether_chaos_moves AFTER UPDATE OF state ON {jobs}
FOR EACH ROW WHEN (OLD.state IS DISTINCT FROM NEW.state AND (OLD.state = 'waiting' OR NEW.state = 'waiting'))
EXECUTE FUNCTION {function}()

-- name: starts_sqlite
CREATE TABLE IF NOT EXISTS {starts} (
    job_id     INTEGER NOT NULL,
    attempt    INTEGER NOT NULL,
    worker     TEXT    NOT NULL,
    started_at REAL    NOT NULL DEFAULT ((julianday('now') - 2440587.5) * 86400.0),
    seen       TEXT
)

-- name: moves_sqlite
CREATE TABLE IF NOT EXISTS {moves} (
    job_id    INTEGER NOT NULL,
    old_state TEXT    NOT NULL,
    state     TEXT    NOT NULL,
    at        REAL    NOT NULL DEFAULT ((julianday('now') - 2440587.5) * 86400.0)
)

-- name: function_sqlite
SELECT 1

-- name: trigger_sqlite
CREATE TRIGGER IF NOT EXISTS tether_chaos_moves AFTER UPDATE OF state ON {jobs}
WHEN old.state IS NOT new.state AND (old.state = 'waiting' OR new.state = 'waiting')
BEGIN
    INSERT INTO {moves} (job_id, old_state, state) VALUES (new.id, old.state, new.state);
END

-- name: start_postgresql
INSERT INTO {starts} (job_id, attempt, worker, seen) VALUES (%s, %s, %s, %s)

-- name: start_sqlite
INSERT INTO {starts} (job_id, attempt, worker, seen) VALUES (?, ?, ?, ?)

-- name: read_starts
SELECT job_id, attempt, started_at, seen FROM {starts} ORDER BY job_id, started_at

-- name: read_moves
SELECT job_id, old_state, state, at FROM {moves} ORDER BY job_id, at
