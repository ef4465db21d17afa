-- The chaos run's effects table (I7): each job of the transactional workload
-- adds one row here inside ctx.transaction(), so the row commits if and only
-- if that attempt's fenced success commits with it. {table} is the table,
-- schema-qualified on PostgreSQL (the run's own schema, dropped at the end);
-- on SQLite its tether_ prefix has it dropped with tether's own tables.
-- No unique constraint on job_id, on purpose: a second row for a job is
-- exactly what the checker must be able to see, not an error that hides it.

-- name: create_postgresql
CREATE TABLE IF NOT EXISTS {table} (
    job_id     bigint      NOT NULL,
    attempt    int         NOT NULL,
    worker     text        NOT NULL,
    written_at timestamptz NOT NULL DEFAULT now()
)

-- name: create_sqlite
CREATE TABLE IF NOT EXISTS {table} (
    job_id     INTEGER NOT NULL,
    attempt    INTEGER NOT NULL,
    worker     TEXT    NOT NULL,
    written_at REAL    NOT NULL DEFAULT ((julianday('now') - 2440587.5) * 86400.0)
)

-- name: insert_postgresql
INSERT INTO {table} (job_id, attempt, worker) VALUES (%s, %s, %s)

-- name: insert_sqlite
INSERT INTO {table} (job_id, attempt, worker) VALUES (?, ?, ?)

-- name: read
SELECT job_id, attempt, worker FROM {table} ORDER BY job_id, attempt

-- name: tasks
-- Which task each job of the run ran: I7 judges the transactional ones.
SELECT id, task FROM {jobs}
