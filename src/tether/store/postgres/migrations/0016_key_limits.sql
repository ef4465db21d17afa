-- tether schema, version 16 (PostgreSQL): per-key limits (issue 44).
-- {schema} is a validated, quoted identifier filled in at load time.
--
-- limit_key: the key a job's per-key limits count it under
-- (using(limit_key=...), or the task's callable of its args). Patterns
-- (app.configure_limit: key_limits) give each key they match limits of its
-- own; a key no pattern matches has none. The claim statements obey them
-- through key_take below, as they obey queue limits through claim_room
-- (migration 0007): an advisory lock per key and fresh counts.
ALTER TABLE {schema}.jobs ADD COLUMN limit_key text;
-- a key's running jobs, counted by key_take: only rows with a key that run
CREATE INDEX jobs_limit_running_idx ON {schema}.jobs (limit_key)
    WHERE state = 'running' AND limit_key IS NOT NULL;

-- One row per pattern. matcher: the pattern as a LIKE pattern (* as %, the
-- rest escaped); rank: its specificity (key_patterns.py: the most specific
-- pattern a key matches is the one it takes, ties broken by pattern).
CREATE TABLE {schema}.key_limits (
    pattern     text PRIMARY KEY,
    matcher     text NOT NULL,
    rank        integer NOT NULL,
    concurrency integer CHECK (concurrency > 0),
    rate_limit  integer CHECK (rate_limit > 0),
    rate_period double precision CHECK (rate_period > 0),
    updated_at  timestamptz NOT NULL,
    CONSTRAINT key_limits_rate_pair CHECK ((rate_limit IS NULL) = (rate_period IS NULL)),
    CONSTRAINT key_limits_some CHECK (concurrency IS NOT NULL OR rate_limit IS NOT NULL)
);

-- The limits a key takes: its best-ranked matching pattern's; no row: none.
CREATE FUNCTION {schema}.key_limit(k text)
RETURNS TABLE (pattern text, concurrency integer, rate_limit integer, rate_period double precision)
LANGUAGE sql STABLE AS $fn$
    SELECT l.pattern, l.concurrency, l.rate_limit, l.rate_period FROM {schema}.key_limits AS l
    WHERE k LIKE l.matcher ORDER BY l.rank DESC, l.pattern COLLATE "C" LIMIT 1
$fn$;

-- Rate limits per key: when each job of a key whose pattern has a rate
-- started, for a sliding window, as queue_starts is for queues. Written by
-- the trigger below (the claim statements sit at psycopg's 4,096-character
-- parse cache and have no room for another CTE; the trigger's WHEN skips
-- every row without a key at once), pruned by key_take under the key's lock.
CREATE TABLE {schema}.key_starts (
    limit_key  text        NOT NULL,
    started_at timestamptz NOT NULL
);
CREATE INDEX key_starts_idx ON {schema}.key_starts (limit_key, started_at);

CREATE FUNCTION {schema}.key_start() RETURNS trigger
LANGUAGE plpgsql AS $fn$
BEGIN
    INSERT INTO {schema}.key_starts (limit_key, started_at)
    SELECT NEW.limit_key, NEW.claimed_at FROM {schema}.key_limit(NEW.limit_key) AS l WHERE l.rate_limit IS NOT NULL;
    RETURN NULL;
END
$fn$;
CREATE TRIGGER jobs_key_start AFTER UPDATE OF state ON {schema}.jobs
FOR EACH ROW WHEN (OLD.state = 'queued' AND NEW.state = 'running' AND NEW.limit_key IS NOT NULL)
EXECUTE FUNCTION {schema}.key_start();

-- Whether the claim may take one more queued job of key k (queries.sql:
-- _key_free calls it for each candidate row that has a key). The first call
-- for k in a transaction works out k's room: none without a matching
-- pattern; else, if another claim is taking k now (its advisory lock,
-- tried, not waited for: a claim passes over a busy key as SKIP LOCKED
-- passes over rows, and two claims never wait on each other), 0; else the
-- pattern's concurrency less k's running jobs and its rate less k's starts
-- in the window, each counted by a statement of its own, so with a fresh
-- snapshot (READ COMMITTED, VOLATILE): they see every claim that held k's
-- lock before and committed. The lock is held until the claim commits.
-- Every call that says yes takes one from k's room, kept in a transaction-
-- local setting (tether.key_rooms, a JSON object): a statement cannot see its
-- own claim's updates, so this count is what stops one claim from taking
-- more of k than its room. A yes for a row the claim then does not take
-- (locked by another, past its LIMIT, an exclusive key's second job) leaves
-- room unused until the next claim: never more than the limit.
-- finishing and worker: as for claim_room, the jobs this same statement
-- completes do not count as running.
CREATE FUNCTION {schema}.key_take(k text, at timestamptz, finishing jsonb, worker text)
RETURNS boolean
LANGUAGE plpgsql VOLATILE AS $fn$
DECLARE
    rooms jsonb := coalesce(nullif(current_setting('tether.key_rooms', true), ''), '{}')::jsonb;
    left_ bigint;
    l record;
    n bigint;
BEGIN
    IF rooms ? k THEN
        left_ := (rooms ->> k)::bigint;
    ELSE
        SELECT * INTO l FROM {schema}.key_limit(k);
        IF NOT FOUND THEN
            left_ := 9000000000000000000;  -- no limit: never counted down to 0
        ELSIF NOT pg_try_advisory_xact_lock(hashtext('tether.limit_key'), hashtext(k)) THEN
            left_ := 0;
        ELSE
            -- read the limits again under the lock: a change committed since counts now
            SELECT * INTO l FROM {schema}.key_limit(k);
            left_ := 2147483647;
            IF l.concurrency IS NOT NULL THEN
                SELECT count(*) INTO n FROM {schema}.jobs AS j
                WHERE j.limit_key = k AND j.state = 'running'
                  AND NOT (finishing IS NOT NULL AND j.locked_by = worker AND finishing ? j.id::text
                           AND j.attempt = (finishing -> j.id::text ->> 0)::int);
                left_ := least(left_, l.concurrency - n);
            END IF;
            IF l.rate_limit IS NOT NULL THEN
                DELETE FROM {schema}.key_starts AS s
                WHERE s.limit_key = k AND s.started_at <= coalesce(at, now()) - make_interval(secs => l.rate_period);
                SELECT count(*) INTO n FROM {schema}.key_starts AS s WHERE s.limit_key = k;
                left_ := least(left_, l.rate_limit - n);
            END IF;
        END IF;
    END IF;
    IF left_ <= 0 THEN
        IF NOT rooms ? k THEN
            PERFORM set_config('tether.key_rooms', (rooms || jsonb_build_object(k, 0))::text, true);
        END IF;
        RETURN false;
    END IF;
    PERFORM set_config('tether.key_rooms', (rooms || jsonb_build_object(k, left_ - 1))::text, true);
    RETURN true;
END
$fn$;
