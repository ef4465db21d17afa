-- tether schema, version 7 (PostgreSQL): queue limits and exclusive keys
-- (issue 20). {schema} is a validated, quoted identifier filled in at load time.
--
-- Limits are rows in the queues table (app.configure_queue), read by the claim
-- statements themselves: no worker needs to know them, and a worker of an
-- older or another app obeys them too.
ALTER TABLE {schema}.queues
    ADD COLUMN concurrency integer CHECK (concurrency > 0),
    ADD COLUMN rate_limit  integer CHECK (rate_limit > 0),
    ADD COLUMN rate_period double precision CHECK (rate_period > 0),
    ADD CONSTRAINT queues_rate_pair CHECK ((rate_limit IS NULL) = (rate_period IS NULL));

-- Exclusive keys: at most one running job per key. The lease is the lock: a
-- job holds its key exactly while it is running, and the reaper frees it with
-- the lease. The claim never tries to take a held key (key_free below), so
-- this constraint never fires in normal work; it is the database's own
-- guarantee, should any path ever get it wrong. An exclusion constraint, not
-- a unique index, because it can be checked at the end of each statement
-- (DEFERRABLE INITIALLY IMMEDIATE) rather than row by row:
-- complete_and_claim ends a key's job and starts the next of that key in one
-- statement, and its claim's update runs before its completion's. Rows
-- without a key are not in its index: they pay nothing but the column.
ALTER TABLE {schema}.jobs ADD COLUMN exclusive_key text;
ALTER TABLE {schema}.jobs ADD CONSTRAINT jobs_exclusive_running
    EXCLUDE USING btree (exclusive_key WITH =) WHERE (state = 'running' AND exclusive_key IS NOT NULL)
    DEFERRABLE INITIALLY IMMEDIATE;

-- Rate limits: when each job of a rate-limited queue was started, for a
-- sliding window (at most rate_limit starts in any rate_period seconds). One
-- row per start, written by the claim statement that starts it (only for
-- queues with a rate), deleted once older than the window by claim_room.
CREATE TABLE {schema}.queue_starts (
    queue      text        NOT NULL,
    started_at timestamptz NOT NULL
);
CREATE INDEX queue_starts_idx ON {schema}.queue_starts (queue, started_at);

-- How many more jobs each limited queue among qs may start now. Called by the
-- claim statements, only when a queue of theirs has a limit. Why a function:
-- a statement reads the snapshot it began with, so two claims that overlap
-- would each count the running jobs as they were before the other's commit
-- and together start more than the limit. Here each limited queue's advisory
-- lock is taken first (in queue order, so two claims never wait on each other
-- in a circle), and held until the claim commits; the counts that follow are
-- separate statements, each with a fresh snapshot (READ COMMITTED, VOLATILE),
-- so they see every claim that held the lock before. Claims of one limited
-- queue are therefore serialized; claims of other queues never take the lock.
-- A dead worker's jobs stay running, and count, until the reaper ends them.
-- finishing and worker: the successes complete_and_claim's own statement is
-- recording ({"<id>": [attempt, ...]}, as _complete_done reads them; NULL for
-- a plain claim). That statement's update is not visible here (no part of a
-- statement sees another's changes), so those jobs, still running under this
-- worker and attempt, would count against the room the completion makes:
-- they are left out, exactly the rows the completion's fence will match.
CREATE FUNCTION {schema}.claim_room(qs text[], at timestamptz, finishing jsonb, worker text)
RETURNS TABLE (limited text, room integer)
LANGUAGE plpgsql VOLATILE AS $fn$
DECLARE
    l record;
    left_ bigint;
    n bigint;
BEGIN
    FOR l IN
        SELECT q.queue, q.concurrency, q.rate_limit, q.rate_period FROM {schema}.queues AS q
        WHERE q.queue = ANY(qs) AND (q.concurrency IS NOT NULL OR q.rate_limit IS NOT NULL)
        ORDER BY q.queue
    LOOP
        PERFORM pg_advisory_xact_lock(hashtext('tether.queue_limit'), hashtext(l.queue));
        -- re-read the limits under the lock: a change committed since counts now
        SELECT q.concurrency, q.rate_limit, q.rate_period INTO l.concurrency, l.rate_limit, l.rate_period
        FROM {schema}.queues AS q WHERE q.queue = l.queue;
        left_ := 2147483647;
        IF l.concurrency IS NOT NULL THEN
            SELECT count(*) INTO n FROM {schema}.jobs AS j
            WHERE j.state = 'running' AND j.queue = l.queue
              AND NOT (finishing IS NOT NULL AND j.locked_by = worker AND finishing ? j.id::text
                       AND j.attempt = (finishing -> j.id::text ->> 0)::int);
            left_ := least(left_, l.concurrency - n);
        END IF;
        IF l.rate_limit IS NOT NULL THEN
            DELETE FROM {schema}.queue_starts AS s
            WHERE s.queue = l.queue AND s.started_at <= at - make_interval(secs => l.rate_period);
            SELECT count(*) INTO n FROM {schema}.queue_starts AS s WHERE s.queue = l.queue;
            left_ := least(left_, l.rate_limit - n);
        END IF;
        limited := l.queue;
        room := greatest(left_, 0);
        RETURN NEXT;
    END LOOP;
END
$fn$;

-- Whether a queued job with exclusive key k may start now: no other claim is
-- taking k at this moment (the key's advisory lock, tried, not waited for: a
-- claim passes over a key another claim holds, as SKIP LOCKED passes over its
-- rows) and no job with k is running (a fresh snapshot, as in claim_room: the
-- claim that held the lock before may have committed after this statement
-- began). The lock is held until the claim commits. Two jobs with one key in
-- one claim both pass here (the lock is the claim's own); the claim keeps
-- only the first of them. finishing and worker: as for claim_room, the job of
-- k that this very statement is completing does not hold k.
CREATE FUNCTION {schema}.key_free(k text, finishing jsonb, worker text)
RETURNS boolean
LANGUAGE plpgsql VOLATILE AS $fn$
BEGIN
    IF NOT pg_try_advisory_xact_lock(hashtext('tether.exclusive_key'), hashtext(k)) THEN
        RETURN false;
    END IF;
    RETURN NOT EXISTS (
        SELECT 1 FROM {schema}.jobs AS j
        WHERE j.exclusive_key = k AND j.state = 'running'
          AND NOT (finishing IS NOT NULL AND j.locked_by = worker AND finishing ? j.id::text
                   AND j.attempt = (finishing -> j.id::text ->> 0)::int));
END
$fn$;
