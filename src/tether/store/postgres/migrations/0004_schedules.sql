-- tether schema, version 4 (PostgreSQL): periodic schedules (I6).
-- {schema} is a validated, quoted identifier filled in at load time.
--
-- One row per schedule an app declared (@app.periodic), upserted by every
-- worker that starts with it. It holds the task's job options too, so a tick
-- becomes a job in one statement from this row alone.
CREATE TABLE {schema}.schedules (
    name         text        PRIMARY KEY,   -- also the task's name
    cron         text        NOT NULL,
    timezone     text        NOT NULL,
    args         jsonb       NOT NULL,
    queue        text        NOT NULL,
    priority     integer     NOT NULL,
    max_attempts integer     NOT NULL CHECK (max_attempts >= 1),
    lease_ttl    double precision CHECK (lease_ttl > 0),
    timeout      double precision CHECK (timeout > 0),
    backoff_base double precision NOT NULL,
    catch_up     integer     NOT NULL CHECK (catch_up >= 0),
    overlap      boolean     NOT NULL,
    -- +1 on every change of the definition: a fire computed from an older one
    -- inserts nothing (the worker read the row, then a deploy changed it)
    version      integer     NOT NULL DEFAULT 1,
    -- when cron or timezone last changed: ticks at or before it are not owed,
    -- so a new expression takes effect at its next tick, not at its past ones
    since        timestamptz NOT NULL,
    created_at   timestamptz NOT NULL,
    updated_at   timestamptz NOT NULL,
    -- when a syncing app last declared it; orphaned once one syncs without it
    -- (kept, not deleted, so its history stays)
    last_seen    timestamptz NOT NULL,
    orphaned     boolean     NOT NULL DEFAULT false,
    last_tick    timestamptz,              -- latest tick decided (fired or skipped)
    last_fired   timestamptz,              -- latest tick that made a job
    last_job_id  bigint,                   -- that job (overlap=False asks whether it is still active)
    skipped      bigint      NOT NULL DEFAULT 0
);

-- The decider: one row per (schedule, tick), inserted ON CONFLICT DO NOTHING
-- by every worker that finds the tick due. The primary key admits one insert;
-- only the statement whose insert landed makes the job. No leader, no lock
-- held between workers. A skipped tick (overlap=False) is a row too.
CREATE TABLE {schema}.schedule_ticks (
    schedule   text        NOT NULL,
    tick       timestamptz NOT NULL,
    skipped    boolean     NOT NULL,
    decided_at timestamptz NOT NULL,
    PRIMARY KEY (schedule, tick)
);

-- A fired job says which tick it is for (ctx.scheduled_for). Nullable columns
-- added without a default: no table rewrite. The unique index is a second
-- guard of I6 on the jobs table itself; partial, so ordinary jobs (schedule
-- NULL) never enter it, and claims and completions, which never change these
-- columns, keep their HOT updates.
ALTER TABLE {schema}.jobs ADD COLUMN schedule text, ADD COLUMN scheduled_for timestamptz;
CREATE UNIQUE INDEX jobs_schedule_tick_idx ON {schema}.jobs (schedule, scheduled_for)
    WHERE schedule IS NOT NULL;
