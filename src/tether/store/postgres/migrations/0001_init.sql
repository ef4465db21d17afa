-- tether schema, version 1 (PostgreSQL).
-- {schema} is a validated, quoted identifier filled in at load time.

CREATE SCHEMA IF NOT EXISTS {schema};

-- One row per job. The lease lives here, on the job row (ADR-0007): locked_by,
-- claimed_at and lease_until are set by the same UPDATE that sets 'running', so
-- a running row without a lease cannot exist.
CREATE TABLE {schema}.jobs (
    id               bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    queue            text        NOT NULL,
    task             text        NOT NULL,
    args             jsonb       NOT NULL,
    state            text        NOT NULL DEFAULT 'queued'
                     CHECK (state IN ('queued', 'running', 'succeeded', 'dead', 'cancelled')),
    priority         integer     NOT NULL DEFAULT 0,
    run_at           timestamptz NOT NULL,
    -- the fencing token: +1 on every claim, never reset
    attempt          integer     NOT NULL DEFAULT 0,
    -- graceful hand-backs; attempt - released is what counts against max_attempts
    released         integer     NOT NULL DEFAULT 0,
    max_attempts     integer     NOT NULL CHECK (max_attempts >= 1),
    lease_ttl        double precision CHECK (lease_ttl > 0),   -- NULL: the worker's TTL
    timeout          double precision CHECK (timeout > 0),     -- per attempt; NULL: none
    backoff_base     double precision NOT NULL DEFAULT 2,
    dedup_key        text,
    locked_by        text,
    claimed_at       timestamptz,
    lease_until      timestamptz,
    -- absolute end of this attempt (claimed_at + timeout); lease_until never passes it
    deadline         timestamptz,
    cancel_requested boolean     NOT NULL DEFAULT false,
    progress         double precision,
    progress_message text,
    result           jsonb,
    last_error       text,
    meta             jsonb,
    created_at       timestamptz NOT NULL,
    finished_at      timestamptz,
    CHECK (state <> 'running' OR (locked_by IS NOT NULL AND lease_until IS NOT NULL))
);

-- Claim: due jobs of a queue in priority order. Partial, so finished history
-- (the bulk of the table) never enters it and claims stay flat as it grows.
CREATE INDEX jobs_claim_idx ON {schema}.jobs (queue, priority DESC, run_at, id)
    WHERE state = 'queued';

-- Reap: running rows by lease end. lease_until is capped at deadline, so one
-- index serves both lapsed leases and attempts past their timeout.
CREATE INDEX jobs_reap_idx ON {schema}.jobs (lease_until)
    WHERE state = 'running';

-- At most one active job per dedup key; finished jobs free their key.
CREATE UNIQUE INDEX jobs_dedup_idx ON {schema}.jobs (dedup_key)
    WHERE dedup_key IS NOT NULL AND state IN ('queued', 'running');

-- The audit trail: one row per attempt, written once, when the attempt ends
-- (complete, fail, release, or the reaper). The running attempt is read off the
-- job row. No foreign key: it would cost a lookup per insert on the hot path,
-- and pruning deletes both tables together.
CREATE TABLE {schema}.attempts (
    job_id      bigint      NOT NULL,
    attempt     integer     NOT NULL,
    worker      text        NOT NULL,
    claimed_at  timestamptz NOT NULL,
    finished_at timestamptz NOT NULL,
    outcome     text        NOT NULL
                CHECK (outcome IN ('succeeded', 'failed', 'lease_expired', 'timed_out', 'cancelled', 'released')),
    error       text,
    traceback   text,
    PRIMARY KEY (job_id, attempt)
);

CREATE TABLE {schema}.workers (
    id          text        PRIMARY KEY,
    host        text        NOT NULL,
    pid         integer     NOT NULL,
    proc_start  bigint,            -- the process's start time, to tell a reused pid apart
    started_at  timestamptz NOT NULL,
    last_seen   timestamptz NOT NULL,
    queues      jsonb       NOT NULL,
    concurrency integer     NOT NULL,
    stopped_at  timestamptz
);
CREATE INDEX workers_host_idx ON {schema}.workers (host) WHERE stopped_at IS NULL;

-- Wake idle workers on enqueue. Statement-level, so a bulk insert of 10,000
-- jobs sends one notification per queue, not 10,000. The payload is the queue
-- name only, never job data. Delayed jobs are found by polling when due.
CREATE FUNCTION {schema}.notify_enqueue() RETURNS trigger
LANGUAGE plpgsql AS $fn$
BEGIN
    PERFORM pg_notify({channel}, q.queue)
    FROM (SELECT DISTINCT queue FROM new_jobs WHERE run_at <= now()) AS q;
    RETURN NULL;
END
$fn$;

CREATE TRIGGER jobs_notify_enqueue
    AFTER INSERT ON {schema}.jobs
    REFERENCING NEW TABLE AS new_jobs
    FOR EACH STATEMENT EXECUTE FUNCTION {schema}.notify_enqueue();
