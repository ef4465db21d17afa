-- tether schema, version 12 (SQLite): uniqueness windows and expiry (issue 44).
--
-- dedup_for: the seconds a job's dedup_key stays taken after the job ended
-- (using(dedup_for="1h")). tether_jobs_dedup_window_idx holds the key of
-- every such job whatever its state, so two producers racing one key inside
-- the window make one job: the index decides. An enqueue that finds the key
-- held by a finished job whose window has passed sets its dedup_for to NULL
-- (queries.sql: release_dedup), which takes the row out of the index, and
-- inserts again. 0001's index (active jobs) stays as it is: the enqueue names
-- no conflict target, so both are arbiters, and a producer of the previous
-- release, whose ON CONFLICT names 0001's predicate (SQLite matches a
-- target's predicate exactly), still enqueues on this schema.
--
-- expires_at: a job not started by then is never started (the claims'
-- predicate); the expiry service (worker/expiry.py) ends it cancelled, with
-- an attempts row of outcome 'expired', walking tether_jobs_expiry_idx: only
-- the queued jobs that have an expiry are in it, so it costs plain jobs nothing.
ALTER TABLE tether_jobs ADD COLUMN dedup_for REAL;
ALTER TABLE tether_jobs ADD COLUMN expires_at REAL;
CREATE UNIQUE INDEX tether_jobs_dedup_window_idx ON tether_jobs (dedup_key)
    WHERE dedup_key IS NOT NULL AND dedup_for IS NOT NULL;
CREATE INDEX tether_jobs_expiry_idx ON tether_jobs (expires_at) WHERE state = 'queued' AND expires_at IS NOT NULL;

-- The attempt outcome `expired` (the expiry service's record of a job that
-- never started). SQLite cannot alter a CHECK constraint, so the attempts
-- table is rebuilt with the wider one, as version 5 did.
CREATE TABLE tether_attempts_v12 (
    job_id      INTEGER NOT NULL,
    attempt     INTEGER NOT NULL,
    worker      TEXT    NOT NULL,
    claimed_at  REAL    NOT NULL,
    finished_at REAL    NOT NULL,
    outcome     TEXT    NOT NULL
                CHECK (outcome IN ('succeeded', 'failed', 'lease_expired', 'timed_out', 'cancelled', 'released',
                                   'snoozed', 'discarded', 'expired')),
    error       TEXT,
    traceback   TEXT,
    PRIMARY KEY (job_id, attempt)
) WITHOUT ROWID;
INSERT INTO tether_attempts_v12 (job_id, attempt, worker, claimed_at, finished_at, outcome, error, traceback)
    SELECT job_id, attempt, worker, claimed_at, finished_at, outcome, error, traceback FROM tether_attempts;
DROP TABLE tether_attempts;
ALTER TABLE tether_attempts_v12 RENAME TO tether_attempts;
CREATE INDEX tether_attempts_finished_idx ON tether_attempts (finished_at, outcome);
