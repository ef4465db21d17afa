-- tether schema, version 6 (SQLite): workers say which tasks they know, and
-- the claim index leads with (queue, task). See the PostgreSQL migration for
-- the tasks column (NULL: an older worker, which claims any task).
ALTER TABLE tether_workers ADD COLUMN tasks TEXT CHECK (tasks IS NULL OR json_valid(tasks));

-- SQLite's claim reads a queue's due rows by index lookup and sorts them
-- (queue IN (...) gives up the index order; it did so before this migration
-- too). With task in the key the lookup is (queue = ? AND task = ?) for each
-- task the worker knows, so jobs of tasks it does not know are never read,
-- however many wait. It replaces the old (queue, priority DESC, run_at, id)
-- index rather than sitting beside it: it serves a lookup on queue alone as
-- well, and the old one's order was never used (the sort happens anyway), so
-- a queued row still costs one index entry, not two.
DROP INDEX tether_jobs_claim_idx;
CREATE INDEX tether_jobs_claim_idx ON tether_jobs (queue, task, priority DESC, run_at, id)
    WHERE state = 'queued';
