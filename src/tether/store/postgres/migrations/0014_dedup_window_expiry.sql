-- tether schema, version 14 (PostgreSQL): uniqueness windows and expiry (issue 44).
-- {schema} is a validated, quoted identifier filled in at load time.
--
-- dedup_for: the seconds a job's dedup_key stays taken after the job ended
-- (using(dedup_for="1h")). jobs_dedup_idx now holds the key of such a job
-- whatever its state, besides every active job's, so two producers racing
-- one key inside the window make one job: the index decides, not a read
-- before the insert. An enqueue that finds the key held by a finished job
-- whose window has passed sets its dedup_for to NULL (queries.sql:
-- dedup_holders), which takes the row out of the index, and inserts again.
-- One index, not a second one beside 0001's: ON CONFLICT without a target
-- (both as arbiters) is refused on jobs, whose exclusive-key constraint
-- (0007) is deferrable. A producer of the previous release names 0001's
-- predicate in its ON CONFLICT, which implies this one's, so PostgreSQL
-- still infers this index for it during a rolling deploy.
--
-- expires_at: a job not started by then is never started (the claims'
-- predicate); the expiry service (worker/expiry.py) ends it cancelled, with
-- an attempts row of outcome 'expired', walking jobs_expiry_idx: only the
-- queued jobs that have an expiry are in it, so it costs plain jobs nothing.
ALTER TABLE {schema}.jobs ADD COLUMN dedup_for double precision, ADD COLUMN expires_at timestamptz;
DROP INDEX {schema}.jobs_dedup_idx;
CREATE UNIQUE INDEX jobs_dedup_idx ON {schema}.jobs (dedup_key)
    WHERE dedup_key IS NOT NULL AND (state IN ('queued', 'running') OR dedup_for IS NOT NULL);
CREATE INDEX jobs_expiry_idx ON {schema}.jobs (expires_at) WHERE state = 'queued' AND expires_at IS NOT NULL;

-- The attempt outcome `expired` (the expiry service's record of a job that
-- never started). NOT VALID, as in version 5: every existing row satisfies
-- the wider check.
ALTER TABLE {schema}.attempts DROP CONSTRAINT attempts_outcome_check;
ALTER TABLE {schema}.attempts ADD CONSTRAINT attempts_outcome_check
    CHECK (outcome IN ('succeeded', 'failed', 'lease_expired', 'timed_out', 'cancelled', 'released',
                       'snoozed', 'discarded', 'expired')) NOT VALID;
