-- tether schema, version 10 (SQLite): workflows, jobs that wait for jobs
-- (issue 42; I9).
--
-- A job with dependencies is inserted 'waiting', a state no claim takes. The
-- transaction that ends one of its dependencies releases it (ending.py: every
-- ending statement runs through ending.end, in the ending's write
-- transaction), so a dependency is released exactly once, and a zombie's late
-- report, which ends nothing, releases nothing.
--
-- SQLite cannot change a CHECK constraint in place: the jobs table is rebuilt
-- with 'waiting' among its states (https://www.sqlite.org/lang_altertable.html,
-- "other kinds of table schema changes"), its columns in the same order, its
-- indexes and trigger made again, and its AUTOINCREMENT sequence kept (so an
-- id that retention deleted is never handed out again).
CREATE TEMP TABLE tether_seq_keep AS SELECT seq FROM sqlite_sequence WHERE name = 'tether_jobs';
CREATE TABLE tether_jobs_new (
    id               INTEGER PRIMARY KEY AUTOINCREMENT,
    queue            TEXT    NOT NULL,
    task             TEXT    NOT NULL,
    args             TEXT    NOT NULL CHECK (json_valid(args)),
    state            TEXT    NOT NULL DEFAULT 'queued'
                     CHECK (state IN ('waiting', 'queued', 'running', 'succeeded', 'dead', 'cancelled')),
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
    schedule         TEXT,
    scheduled_for    REAL,
    exclusive_key    TEXT,
    trace            TEXT,
    CHECK (state <> 'running' OR (locked_by IS NOT NULL AND lease_until IS NOT NULL))
);

INSERT INTO tether_jobs_new SELECT * FROM tether_jobs;
DROP TABLE tether_jobs;
ALTER TABLE tether_jobs_new RENAME TO tether_jobs;
UPDATE sqlite_sequence SET seq = max(seq, coalesce((SELECT seq FROM tether_seq_keep), 0)) WHERE name = 'tether_jobs';
DROP TABLE temp.tether_seq_keep;

CREATE INDEX tether_jobs_reap_idx ON tether_jobs (lease_until)
    WHERE state = 'running';
CREATE UNIQUE INDEX tether_jobs_dedup_idx ON tether_jobs (dedup_key)
    WHERE dedup_key IS NOT NULL AND state IN ('queued', 'running');
CREATE UNIQUE INDEX tether_jobs_schedule_tick_idx ON tether_jobs (schedule, scheduled_for)
    WHERE schedule IS NOT NULL;
CREATE INDEX tether_jobs_finished_idx ON tether_jobs (state, finished_at) WHERE finished_at IS NOT NULL;
CREATE INDEX tether_jobs_claim_idx ON tether_jobs (queue, task, priority DESC, run_at, id)
    WHERE state = 'queued';
CREATE UNIQUE INDEX tether_jobs_exclusive_running_idx ON tether_jobs (exclusive_key)
    WHERE state = 'running' AND exclusive_key IS NOT NULL;
CREATE TRIGGER tether_queue_starts_record AFTER UPDATE OF state ON tether_jobs
WHEN OLD.state = 'queued' AND NEW.state = 'running'
     AND NEW.queue IN (SELECT queue FROM tether_queues WHERE rate_limit IS NOT NULL)
BEGIN
    INSERT INTO tether_queue_starts (queue, started_at) VALUES (NEW.queue, NEW.claimed_at);
    DELETE FROM tether_queue_starts
    WHERE queue = NEW.queue
      AND started_at <= NEW.claimed_at - (SELECT rate_period FROM tether_queues WHERE queue = NEW.queue);
END;
CREATE INDEX tether_jobs_exclusive_idx ON tether_jobs (exclusive_key, state, priority DESC, run_at, id)
    WHERE exclusive_key IS NOT NULL;

-- A workflow run: a name for people; its id is the database's.
CREATE TABLE tether_workflows (
    id         INTEGER PRIMARY KEY AUTOINCREMENT,
    name       TEXT NOT NULL,
    created_at REAL NOT NULL
);

-- Its steps: one row per job.
CREATE TABLE tether_workflow_steps (
    job_id      INTEGER PRIMARY KEY,
    workflow_id INTEGER NOT NULL,
    name        TEXT    NOT NULL,
    UNIQUE (workflow_id, name)
);

-- The edges: job_id waits for upstream_id, keyed by the upstream (how an
-- ending finds its dependents).
CREATE TABLE tether_job_deps (
    upstream_id INTEGER NOT NULL,
    job_id      INTEGER NOT NULL,
    PRIMARY KEY (upstream_id, job_id)
) WITHOUT ROWID;
CREATE INDEX tether_job_deps_job_idx ON tether_job_deps (job_id);

-- One row per job that waits: its dependencies not yet ended (pending), those
-- that ended otherwise than in success (failed), its policy, and the upstream
-- whose failure cancelled it (app.retry of that one puts it back to waiting).
CREATE TABLE tether_job_waits (
    job_id       INTEGER PRIMARY KEY,
    pending      INTEGER NOT NULL,
    failed       INTEGER NOT NULL DEFAULT 0,
    on_failure   TEXT    NOT NULL CHECK (on_failure IN ('cancel', 'run')),
    cancelled_by INTEGER
);
CREATE INDEX tether_job_waits_cancelled_by_idx ON tether_job_waits (cancelled_by) WHERE cancelled_by IS NOT NULL;

-- Batches (as on PostgreSQL, migration 0012, which says why the members'
-- count is split over shard rows; SQLite has one writer at a time, so the
-- shards only keep the two backends alike). A member is marked by an edge in
-- tether_job_deps to no job: job_id = -(batch id * 16 + shard).
CREATE TABLE tether_batches (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    created_at  REAL    NOT NULL,
    shards      INTEGER NOT NULL CHECK (shards BETWEEN 1 AND 16),
    zeroed      INTEGER NOT NULL DEFAULT 0,
    on_complete INTEGER,
    on_success  INTEGER,
    finished_at REAL
);
CREATE INDEX tether_batches_open_idx ON tether_batches (id) WHERE finished_at IS NULL;
CREATE INDEX tether_batches_on_complete_idx ON tether_batches (on_complete) WHERE on_complete IS NOT NULL;
CREATE INDEX tether_batches_on_success_idx ON tether_batches (on_success) WHERE on_success IS NOT NULL;
CREATE TABLE tether_batch_shards (
    batch_id INTEGER NOT NULL,
    shard    INTEGER NOT NULL,
    pending  INTEGER NOT NULL,
    failed   INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (batch_id, shard)
) WITHOUT ROWID;
