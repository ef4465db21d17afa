-- tether schema, version 15 (PostgreSQL): schedules managed at run time
-- (app.add_schedule, pause, resume, remove, trigger; issue 44).
-- {schema} is a validated, quoted identifier filled in at load time.
--
-- A dynamic schedule is a row no app declares: written by add_schedule,
-- never orphaned by a sync, and fired by every worker that knows its task.
-- Its task is named in task (a code schedule's task is its own name: NULL).
-- paused: no fire takes its ticks; resume moves since to its now, so the
-- ticks missed while paused are not owed (no catch-up storm). A trigger is a
-- tick row with manual = true at the database's now, and its job; triggered
-- counts them. Every column is nullable or has a constant default: no table
-- rewrite, and workers of the previous release, which never name them, go on.
ALTER TABLE {schema}.schedules
    ADD COLUMN task text,
    ADD COLUMN dynamic boolean NOT NULL DEFAULT false,
    ADD COLUMN paused boolean NOT NULL DEFAULT false,
    ADD COLUMN triggered bigint NOT NULL DEFAULT 0,
    ADD COLUMN last_triggered timestamptz;
ALTER TABLE {schema}.schedule_ticks ADD COLUMN manual boolean NOT NULL DEFAULT false;
