-- tether schema, version 7 (SQLite): queue limits and exclusive keys (issue 20).
--
-- Limits are columns of the queues table (app.configure_queue), read by the
-- claim statements themselves. SQLite runs one writer at a time, so a claim's
-- counts are exact: no other claim can commit between its count and its update.
ALTER TABLE tether_queues ADD COLUMN concurrency INTEGER CHECK (concurrency > 0);
ALTER TABLE tether_queues ADD COLUMN rate_limit INTEGER CHECK (rate_limit > 0);
ALTER TABLE tether_queues ADD COLUMN rate_period REAL CHECK (rate_period > 0);

-- Exclusive keys: at most one running job per key; the lease is the lock (the
-- reaper frees the key with the lease). The claim never takes a held key, so
-- the unique index never fires in normal work: it is the database's guarantee.
-- The second index finds a key's running and queued jobs for the claim.
ALTER TABLE tether_jobs ADD COLUMN exclusive_key TEXT;
CREATE UNIQUE INDEX tether_jobs_exclusive_running_idx ON tether_jobs (exclusive_key)
    WHERE state = 'running' AND exclusive_key IS NOT NULL;
CREATE INDEX tether_jobs_exclusive_idx ON tether_jobs (exclusive_key, state)
    WHERE exclusive_key IS NOT NULL;

-- Rate limits: one row per start of a job in a rate-limited queue, for a
-- sliding window (at most rate_limit starts in any rate_period seconds).
CREATE TABLE tether_queue_starts (
    queue      TEXT NOT NULL,
    started_at REAL NOT NULL
);
CREATE INDEX tether_queue_starts_idx ON tether_queue_starts (queue, started_at);

-- Written by a trigger because SQLite has no data-modifying CTEs: a claim is
-- one UPDATE, and only it turns a queued job running. The WHEN is checked per
-- updated row, and its first two terms fail at once for every other update.
-- Starts older than the window are deleted as new ones arrive.
CREATE TRIGGER tether_queue_starts_record AFTER UPDATE OF state ON tether_jobs
WHEN OLD.state = 'queued' AND NEW.state = 'running'
     AND NEW.queue IN (SELECT queue FROM tether_queues WHERE rate_limit IS NOT NULL)
BEGIN
    INSERT INTO tether_queue_starts (queue, started_at) VALUES (NEW.queue, NEW.claimed_at);
    DELETE FROM tether_queue_starts
    WHERE queue = NEW.queue
      AND started_at <= NEW.claimed_at - (SELECT rate_period FROM tether_queues WHERE queue = NEW.queue);
END;
