-- tether schema, version 4 (SQLite): periodic schedules (I6).
-- Mirrors the PostgreSQL migration; see it for the reasons. Times are REAL
-- epoch seconds like everywhere else in this schema.
CREATE TABLE tether_schedules (
    name         TEXT    PRIMARY KEY,
    cron         TEXT    NOT NULL,
    timezone     TEXT    NOT NULL,
    args         TEXT    NOT NULL CHECK (json_valid(args)),
    queue        TEXT    NOT NULL,
    priority     INTEGER NOT NULL,
    max_attempts INTEGER NOT NULL CHECK (max_attempts >= 1),
    lease_ttl    REAL    CHECK (lease_ttl > 0),
    timeout      REAL    CHECK (timeout > 0),
    backoff_base REAL    NOT NULL,
    catch_up     INTEGER NOT NULL CHECK (catch_up >= 0),
    overlap      INTEGER NOT NULL,
    version      INTEGER NOT NULL DEFAULT 1,
    since        REAL    NOT NULL,
    created_at   REAL    NOT NULL,
    updated_at   REAL    NOT NULL,
    last_seen    REAL    NOT NULL,
    orphaned     INTEGER NOT NULL DEFAULT 0,
    last_tick    REAL,
    last_fired   REAL,
    last_job_id  INTEGER,
    skipped      INTEGER NOT NULL DEFAULT 0
);

CREATE TABLE tether_schedule_ticks (
    schedule   TEXT    NOT NULL,
    tick       REAL    NOT NULL,
    skipped    INTEGER NOT NULL,
    decided_at REAL    NOT NULL,
    PRIMARY KEY (schedule, tick)
) WITHOUT ROWID;

ALTER TABLE tether_jobs ADD COLUMN schedule TEXT;
ALTER TABLE tether_jobs ADD COLUMN scheduled_for REAL;
CREATE UNIQUE INDEX tether_jobs_schedule_tick_idx ON tether_jobs (schedule, scheduled_for)
    WHERE schedule IS NOT NULL;
