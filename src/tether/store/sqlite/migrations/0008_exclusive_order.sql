-- tether schema, version 8 (SQLite): a key's jobs indexed in claim order.
--
-- A claim takes a job with an exclusive key only if it is the first queued,
-- due job of its key (_key_free). With tether_jobs_exclusive_idx on
-- (exclusive_key, state), finding that first job read and sorted every
-- queued job of the key, once for each of the key's jobs the claim looked
-- at: a claim over 4,000 queued jobs of one key, none running yet, took
-- 4.5 s with the write lock held (quadratic in the key's backlog). With the
-- claim order in the key it is one index seek. The index replaces the old
-- one rather than sitting beside it: its (exclusive_key, state) prefix still
-- finds a key's running job.
DROP INDEX tether_jobs_exclusive_idx;
CREATE INDEX tether_jobs_exclusive_idx ON tether_jobs (exclusive_key, state, priority DESC, run_at, id)
    WHERE exclusive_key IS NOT NULL;
