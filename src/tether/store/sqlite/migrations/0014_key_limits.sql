-- tether schema, version 14 (SQLite): per-key limits (issue 44).
--
-- limit_key: the key a job's per-key limits count it under
-- (using(limit_key=...), or the task's callable of its args). Patterns
-- (app.configure_limit: tether_key_limits) give each key they match limits
-- of their own; a key no pattern matches has none. SQLite runs one writer at
-- a time, so a claim's counts are exact, as for queue limits (migration 0007).
ALTER TABLE tether_jobs ADD COLUMN limit_key TEXT;
CREATE INDEX tether_jobs_limit_running_idx ON tether_jobs (limit_key)
    WHERE state = 'running' AND limit_key IS NOT NULL;

-- One row per pattern. matcher: the pattern as a GLOB (case-sensitive; ?
-- and [ bracketed to stand for themselves); rank: its specificity
-- (key_patterns.py: a key takes its most specific matching pattern's limits).
CREATE TABLE tether_key_limits (
    pattern     TEXT PRIMARY KEY,
    matcher     TEXT NOT NULL,
    rank        INTEGER NOT NULL,
    concurrency INTEGER CHECK (concurrency > 0),
    rate_limit  INTEGER CHECK (rate_limit > 0),
    rate_period REAL CHECK (rate_period > 0),
    updated_at  REAL NOT NULL,
    CHECK ((rate_limit IS NULL) = (rate_period IS NULL)),
    CHECK (concurrency IS NOT NULL OR rate_limit IS NOT NULL)
);

-- Rate limits per key: one row per start of a job whose key's pattern has a
-- rate, for a sliding window. Written by a trigger, as tether_queue_starts
-- is: a claim is one UPDATE. A key's starts older than its window are
-- deleted as its new ones arrive.
CREATE TABLE tether_key_starts (
    limit_key  TEXT NOT NULL,
    started_at REAL NOT NULL
);
CREATE INDEX tether_key_starts_idx ON tether_key_starts (limit_key, started_at);

CREATE TRIGGER tether_key_starts_record AFTER UPDATE OF state ON tether_jobs
WHEN OLD.state = 'queued' AND NEW.state = 'running' AND NEW.limit_key IS NOT NULL
     AND EXISTS (SELECT 1 FROM tether_key_limits WHERE rate_limit IS NOT NULL)
BEGIN
    INSERT INTO tether_key_starts (limit_key, started_at)
    SELECT NEW.limit_key, NEW.claimed_at
    FROM (SELECT rate_limit FROM tether_key_limits WHERE NEW.limit_key GLOB matcher
          ORDER BY rank DESC, pattern LIMIT 1)
    WHERE rate_limit IS NOT NULL;
    DELETE FROM tether_key_starts
    WHERE limit_key = NEW.limit_key
      AND started_at <= NEW.claimed_at - coalesce((SELECT rate_period FROM tether_key_limits
                                                   WHERE NEW.limit_key GLOB matcher
                                                   ORDER BY rank DESC, pattern LIMIT 1), 0);
END;
