-- tether schema, version 1 (SQLite).
-- Times are REAL seconds since the epoch, from the one clock expression the
-- queries use; SQLite lives on the workers' machine, so its clock is theirs.
-- Columns mirror the PostgreSQL schema; see its migration for the reasons.

CREATE TABLE tether_jobs (
    -- AUTOINCREMENT: a pruned job's id is never handed out again, so an old
    -- attempt row can never be mistaken for a new job's.
    id               INTEGER PRIMARY KEY AUTOINCREMENT,
    queue            TEXT    NOT NULL,
    task             TEXT    NOT NULL,
    args             TEXT    NOT NULL CHECK (json_valid(args)),
    state            TEXT    NOT NULL DEFAULT 'queued'
                     CHECK (state IN ('queued', 'running', 'succeeded', 'dead', 'cancelled')),
    priority         INTEGER NOT NULL DEFAULT 0,
    run_at           REAL    NOT NULL,
    attempt          INTEGER NOT NULL DEFAULT 0,
    released         INTEGER NOT NULL DEFAULT 0,
    max_attempts     INTEGER NOT NULL CHECK (max_attempts >= 1),
    lease_ttl        REAL    CHECK (lease_ttl > 0),
    timeout          REAL    CHECK (timeout > 0),
    backoff_base     REAL    NOT NULL DEFAULT 2,
    dedup_key        TEXT,
    locked_by        TEXT,
    claimed_at       REAL,
    lease_until      REAL,
    deadline         REAL,
    cancel_requested INTEGER NOT NULL DEFAULT 0,
    progress         REAL,
    progress_message TEXT,
    result           TEXT,
    last_error       TEXT,
    meta             TEXT,
    created_at       REAL    NOT NULL,
    finished_at      REAL,
    CHECK (state <> 'running' OR (locked_by IS NOT NULL AND lease_until IS NOT NULL))
);

-- Claim: only queued rows, so finished history never slows a claim.
CREATE INDEX tether_jobs_claim_idx ON tether_jobs (queue, priority DESC, run_at, id)
    WHERE state = 'queued';

-- Reap: running rows by lease end (capped at the attempt's deadline).
CREATE INDEX tether_jobs_reap_idx ON tether_jobs (lease_until)
    WHERE state = 'running';

-- At most one active job per dedup key.
CREATE UNIQUE INDEX tether_jobs_dedup_idx ON tether_jobs (dedup_key)
    WHERE dedup_key IS NOT NULL AND state IN ('queued', 'running');

CREATE TABLE tether_attempts (
    job_id      INTEGER NOT NULL,
    attempt     INTEGER NOT NULL,
    worker      TEXT    NOT NULL,
    claimed_at  REAL    NOT NULL,
    finished_at REAL    NOT NULL,
    outcome     TEXT    NOT NULL
                CHECK (outcome IN ('succeeded', 'failed', 'lease_expired', 'timed_out', 'cancelled', 'released')),
    error       TEXT,
    traceback   TEXT,
    PRIMARY KEY (job_id, attempt)
) WITHOUT ROWID;

CREATE TABLE tether_workers (
    id          TEXT    PRIMARY KEY,
    host        TEXT    NOT NULL,
    pid         INTEGER NOT NULL,
    proc_start  INTEGER,
    started_at  REAL    NOT NULL,
    last_seen   REAL    NOT NULL,
    queues      TEXT    NOT NULL,
    concurrency INTEGER NOT NULL,
    stopped_at  REAL
);
CREATE INDEX tether_workers_host_idx ON tether_workers (host) WHERE stopped_at IS NULL;
