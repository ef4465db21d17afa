-- tether schema, version 8 (PostgreSQL): notify finished jobs only to waiters
-- (issue 22). {schema} is a validated, quoted identifier filled in at load time.
--
-- Why: a transaction that sends a NOTIFY takes, at commit, one lock that is
-- the same for the whole server (PostgreSQL serialises every notifying commit
-- to keep the queue in commit order). Version 5's trigger sent one for every
-- statement that finished a job, so every worker's every round queued behind
-- every other's: with 4 to 16 worker processes, half or more of the busy
-- sessions sat waiting on that lock, and adding workers made tether slower.
-- Almost always nobody is waiting for those jobs. Now a waiter (app.wait,
-- where the store has a LISTEN channel) says which job it waits for, in this
-- table, and the trigger notifies only the ids someone waits for: no waiter,
-- no NOTIFY, no lock.
--
-- One row per waiting call, deleted when the call returns. expires_at bounds
-- a row whose process died before deleting it (the wait's deadline, or a day
-- for a wait without one); the trigger ignores expired rows and the next
-- registration deletes them (watch_finished).
CREATE TABLE {schema}.waiters (
    id         bigserial   PRIMARY KEY,
    job_id     bigint      NOT NULL,
    expires_at timestamptz NOT NULL
);
CREATE INDEX waiters_job_idx ON {schema}.waiters (job_id);

-- The same notification as version 5's (ids only, 400 to a payload; a
-- 'succeeded' attempt always ends its job, any other only if the job is now
-- dead or cancelled; a snooze never), for the waited-for ids only. The first
-- test is one probe of a table that is empty while nobody waits: that is the
-- whole cost of a completion statement then. A waiter that registers after
-- this test ran but reads the job before the completion commits hears
-- nothing: FinishWatch re-reads soon after registering (50 ms, growing),
-- which covers that window of one commit.
CREATE OR REPLACE FUNCTION {schema}.notify_finished() RETURNS trigger
LANGUAGE plpgsql AS $fn$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM {schema}.waiters) THEN
        RETURN NULL;
    END IF;
    PERFORM pg_notify({done_channel}, string_agg(f.job_id::text, ','))
    FROM (
        SELECT a.job_id, (row_number() OVER ()) / 400 AS chunk
        FROM new_attempts AS a
        WHERE EXISTS (SELECT 1 FROM {schema}.waiters AS w
                      WHERE w.job_id = a.job_id AND w.expires_at > now())
          AND (a.outcome = 'succeeded'
               OR (a.outcome <> 'snoozed' AND EXISTS (
                    SELECT 1 FROM {schema}.jobs AS j
                    WHERE j.id = a.job_id AND j.state IN ('dead', 'cancelled'))))
    ) AS f
    GROUP BY f.chunk;
    RETURN NULL;
END
$fn$;
