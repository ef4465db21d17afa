-- tether schema, version 5 (SQLite): job control (issue 20). See the
-- PostgreSQL migration of the same name for the reasons.

-- Retention: finished jobs by state and finish time, for the pruner. Partial:
-- queued and running rows (finished_at NULL) are never in it. The pruner's
-- `finished_at < cutoff` implies the predicate, so SQLite may use it.
CREATE INDEX tether_jobs_finished_idx ON tether_jobs (state, finished_at) WHERE finished_at IS NOT NULL;

-- Retry policies: the outcomes `snoozed` and `discarded`. SQLite cannot alter
-- a CHECK constraint, so the attempts table is rebuilt with the wider one
-- (inside the migration's write transaction: a copy of the audit trail).
CREATE TABLE tether_attempts_v4 (
    job_id      INTEGER NOT NULL,
    attempt     INTEGER NOT NULL,
    worker      TEXT    NOT NULL,
    claimed_at  REAL    NOT NULL,
    finished_at REAL    NOT NULL,
    outcome     TEXT    NOT NULL
                CHECK (outcome IN ('succeeded', 'failed', 'lease_expired', 'timed_out', 'cancelled', 'released',
                                   'snoozed', 'discarded')),
    error       TEXT,
    traceback   TEXT,
    PRIMARY KEY (job_id, attempt)
) WITHOUT ROWID;
INSERT INTO tether_attempts_v4 (job_id, attempt, worker, claimed_at, finished_at, outcome, error, traceback)
    SELECT job_id, attempt, worker, claimed_at, finished_at, outcome, error, traceback FROM tether_attempts;
DROP TABLE tether_attempts;
ALTER TABLE tether_attempts_v4 RENAME TO tether_attempts;
CREATE INDEX tether_attempts_finished_idx ON tether_attempts (finished_at, outcome);

-- Queues an operator paused (app.pause): read by the claim statements, which
-- leave paused queues out. A handful of rows.
CREATE TABLE tether_queues (
    queue      TEXT    PRIMARY KEY,
    paused     INTEGER NOT NULL DEFAULT 0,
    updated_at REAL    NOT NULL
);
