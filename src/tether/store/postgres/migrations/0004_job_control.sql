-- tether schema, version 4 (PostgreSQL): job control (issue 20).
-- {schema} is a validated, quoted identifier filled in at load time.
-- (Another branch may add its own 0004: the one merged second renumbers.)
--
-- Retention: finished jobs by state and by when they finished, for the pruner
-- (`prune`, `prunable` in queries.sql), which deletes the oldest finished rows
-- of one state at a time. Partial on finished_at IS NOT NULL, which holds
-- exactly for finished rows (every statement that ends a job sets it, retry
-- clears it): queued and running rows, the hot part of the table, are never
-- in it, so an enqueue writes no entry here and a claim never reads it. The
-- cost on the hot path is one entry per job that finishes; the update that
-- finishes a job already changes `state`, a column of the other partial
-- indexes' predicates, so it was never a HOT update and already wrote an
-- entry in every index. The pruner's WHERE (`finished_at < cutoff`) implies
-- the predicate, so the planner can use the index without being told.
-- Built inside the migration's transaction (CREATE INDEX CONCURRENTLY cannot
-- be): on a large existing table it blocks writes to jobs while it builds.
CREATE INDEX jobs_finished_idx ON {schema}.jobs (state, finished_at) WHERE finished_at IS NOT NULL;

-- Retry policies: two more attempt outcomes. `snoozed`: the handler raised
-- tether.Retry(delay): queued again later without spending the budget.
-- `discarded`: the handler raised tether.Discard(reason): dead at once.
-- NOT VALID: every existing row satisfies the wider check, so there is
-- nothing to scan for; new rows are checked as before.
ALTER TABLE {schema}.attempts DROP CONSTRAINT attempts_outcome_check;
ALTER TABLE {schema}.attempts ADD CONSTRAINT attempts_outcome_check
    CHECK (outcome IN ('succeeded', 'failed', 'lease_expired', 'timed_out', 'cancelled', 'released',
                       'snoozed', 'discarded')) NOT VALID;
