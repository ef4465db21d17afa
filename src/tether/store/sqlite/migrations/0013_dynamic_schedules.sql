-- tether schema, version 13 (SQLite): schedules managed at run time
-- (issue 44). Mirrors the PostgreSQL migration; see it for the reasons.
ALTER TABLE tether_schedules ADD COLUMN task TEXT;
ALTER TABLE tether_schedules ADD COLUMN dynamic INTEGER NOT NULL DEFAULT 0;
ALTER TABLE tether_schedules ADD COLUMN paused INTEGER NOT NULL DEFAULT 0;
ALTER TABLE tether_schedules ADD COLUMN triggered INTEGER NOT NULL DEFAULT 0;
ALTER TABLE tether_schedules ADD COLUMN last_triggered REAL;
ALTER TABLE tether_schedule_ticks ADD COLUMN manual INTEGER NOT NULL DEFAULT 0;
