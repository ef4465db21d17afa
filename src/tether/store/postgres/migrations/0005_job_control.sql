-- tether schema, version 5 (PostgreSQL): job control (issue 20).
-- {schema} is a validated, quoted identifier filled in at load time.
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

-- Results: wake app.wait() when a job finishes. One NOTIFY per statement that
-- writes attempts rows (complete, complete_and_claim, fail, release, reap),
-- not one per job: the payload is the finished jobs' ids, comma-separated,
-- 400 to a notification (well under the 8,000-byte payload limit). Ids only,
-- never job data. A 'succeeded' attempt always ends its job; any other ends
-- it only if the job is now dead or cancelled (the statement's own update is
-- visible here: an AFTER trigger runs once the whole statement is done), read
-- by primary key for those rows only, so a batch of successes costs no lookup.
-- A snooze never finishes a job. Cancelling a queued job writes no attempt:
-- the cancel query sends its own notification.
-- The channel is {done_channel}, not the enqueue channel: workers do not
-- LISTEN on it, so a busy queue's completions wake nobody but waiters.
CREATE FUNCTION {schema}.notify_finished() RETURNS trigger
LANGUAGE plpgsql AS $fn$
BEGIN
    PERFORM pg_notify({done_channel}, string_agg(f.job_id::text, ','))
    FROM (
        SELECT a.job_id, (row_number() OVER ()) / 400 AS chunk
        FROM new_attempts AS a
        WHERE a.outcome = 'succeeded'
           OR (a.outcome <> 'snoozed' AND EXISTS (
                SELECT 1 FROM {schema}.jobs AS j
                WHERE j.id = a.job_id AND j.state IN ('dead', 'cancelled')))
    ) AS f
    GROUP BY f.chunk;
    RETURN NULL;
END
$fn$;

CREATE TRIGGER attempts_notify_finished
    AFTER INSERT ON {schema}.attempts
    REFERENCING NEW TABLE AS new_attempts
    FOR EACH STATEMENT EXECUTE FUNCTION {schema}.notify_finished();

-- Queues an operator paused (app.pause, tether pause): one row per queue ever
-- paused or resumed, so a handful of rows. The claim statements read it once
-- per statement (an InitPlan over this tiny table) and leave paused queues out:
-- no worker claims from a paused queue after the claim round it is in.
CREATE TABLE {schema}.queues (
    queue      text        PRIMARY KEY,
    paused     boolean     NOT NULL DEFAULT false,
    updated_at timestamptz NOT NULL
);
