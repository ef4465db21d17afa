-- tether schema, version 12 (PostgreSQL): workflows, jobs that wait for jobs
-- (issue 42; I9). {schema} is a validated, quoted identifier filled in at load time.
--
-- A job with dependencies is inserted 'waiting', a state no claim takes (the
-- claim statements read only 'queued' rows). The statement that ends one of
-- its dependencies releases it, in that statement: queries.sql's _ending
-- calls jobs_ended() below for the ended rows that have dependents, and every
-- ending (complete, complete_and_claim, fail, release, reap, cancel,
-- bury_unknown; for the server's remote workers too) goes through _ending.
-- The ending is fenced (id AND attempt AND locked_by), so a zombie's late
-- report ends nothing and releases nothing.
ALTER TABLE {schema}.jobs DROP CONSTRAINT jobs_state_check;
ALTER TABLE {schema}.jobs ADD CONSTRAINT jobs_state_check
    CHECK (state IN ('waiting', 'queued', 'running', 'succeeded', 'dead', 'cancelled'));

-- A workflow run: a name for people; its id is the database's.
CREATE TABLE {schema}.workflows (
    id         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    name       text        NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
);

-- Its steps: one row per job (ctx.workflow_id and ctx.upstream read it by job).
CREATE TABLE {schema}.workflow_steps (
    job_id      bigint PRIMARY KEY,
    workflow_id bigint NOT NULL,
    name        text   NOT NULL,
    UNIQUE (workflow_id, name)
);

-- The edges: job_id waits for upstream_id. Keyed by the upstream, which is
-- how an ending finds its dependents (one index probe per ended job that
-- _ending makes only while this table has rows at all).
CREATE TABLE {schema}.job_deps (
    upstream_id bigint NOT NULL,
    job_id      bigint NOT NULL,
    PRIMARY KEY (upstream_id, job_id)
);
CREATE INDEX job_deps_job_idx ON {schema}.job_deps (job_id);

-- One row per job that waits: how many of its dependencies have not ended
-- (pending) and how many ended otherwise than in success (failed). Each ending
-- decrements its dependents' rows in an UPDATE, so two upstreams ending at
-- once serialize on the dependent's row lock and the second one sees the
-- first one's count (READ COMMITTED re-reads the locked row): exactly one of
-- them takes pending to 0 and releases the job. A count, not a scan of the
-- upstreams' states, which two concurrent endings would each read as the
-- other's not yet ended. cancelled_by: the upstream whose failure cancelled
-- this job (app.retry of it puts the job back to waiting).
CREATE TABLE {schema}.job_waits (
    job_id       bigint  PRIMARY KEY,
    pending      integer NOT NULL,
    failed       integer NOT NULL DEFAULT 0,
    on_failure   text    NOT NULL CHECK (on_failure IN ('cancel', 'run')),
    cancelled_by bigint
);
CREATE INDEX job_waits_cancelled_by_idx ON {schema}.job_waits (cancelled_by) WHERE cancelled_by IS NOT NULL;

-- Batches: many jobs, callbacks when they have all ended. A member is marked
-- by an edge in job_deps to no job: job_id = -(batch id * 16 + shard), so the
-- check _ending makes for dependents finds members too, and the member's
-- shard rides in the edge. Each batch's count of members still pending is
-- split over up to 16 shard rows (a member's ending decrements its own
-- shard's): members ending on many workers at once do not all queue on one
-- row. A shard that reaches zero adds one to its batch's `zeroed`, once per
-- shard, under the batch row's lock; the ending that takes `zeroed` to
-- `shards` is the last one, and releases the callbacks in its statement.
CREATE TABLE {schema}.batches (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    created_at  timestamptz NOT NULL DEFAULT now(),
    shards      integer     NOT NULL CHECK (shards BETWEEN 1 AND 16),
    zeroed      integer     NOT NULL DEFAULT 0,
    on_complete bigint,
    on_success  bigint,
    finished_at timestamptz
);
-- The batches not yet finished: retention keeps their members (queries.sql, _unfinished_run).
CREATE INDEX batches_open_idx ON {schema}.batches (id) WHERE finished_at IS NULL;
-- A callback's ctx.batch finds its batch by these.
CREATE INDEX batches_on_complete_idx ON {schema}.batches (on_complete) WHERE on_complete IS NOT NULL;
CREATE INDEX batches_on_success_idx ON {schema}.batches (on_success) WHERE on_success IS NOT NULL;
CREATE TABLE {schema}.batch_shards (
    batch_id bigint  NOT NULL,
    shard    integer NOT NULL,
    pending  integer NOT NULL,
    failed   integer NOT NULL DEFAULT 0,
    PRIMARY KEY (batch_id, shard)
);

-- What every ending does besides its audit, for the ended jobs that someone
-- waits for (app.wait: migration 0008's notification, which _ending sent
-- itself before) or that have dependents. Called by _ending once per
-- statement, only when one of those exists: a plain job's ending never calls
-- it. A VOLATILE function: its statements see the calling statement's
-- updates, and take the dependents' row locks in the calling transaction.
--   cut:     the waiting dependents (transitively) of a job that ended dead or
--            cancelled, whose policy is on_failure='cancel', end cancelled
--            with a reason naming the upstream that failed.
--   counted: every other dependent of an ended job (or of a cut one) counts
--            that dependency as ended (and failed, when it did not succeed).
--   freed:   those with nothing pending, and no failure or the policy
--            on_failure='run', are queued; idle workers are woken.
CREATE FUNCTION {schema}.jobs_ended(ids bigint[], states text[]) RETURNS void
LANGUAGE plpgsql VOLATILE AS $fn$
DECLARE
    woke bigint;
BEGIN
    IF EXISTS (SELECT 1 FROM {schema}.waiters) THEN
        PERFORM pg_notify({done_channel}, string_agg(f.id::text, ','))
        FROM (SELECT u.id, (row_number() OVER ()) / 400 AS chunk
              FROM unnest(ids, states) AS u(id, state)
              WHERE u.state IN ('succeeded', 'dead', 'cancelled')
                AND EXISTS (SELECT 1 FROM {schema}.waiters AS w
                            WHERE w.job_id = u.id AND w.expires_at > now())) AS f
        GROUP BY f.chunk;
    END IF;
    IF NOT EXISTS (SELECT 1 FROM {schema}.job_deps AS d WHERE d.upstream_id = ANY(ids)) THEN
        RETURN;
    END IF;
    -- The direct dependents' count rows, locked in id order first: two
    -- statements ending jobs with dependents in common then queue on them in
    -- one order, never in a deadlock.
    PERFORM 1 FROM {schema}.job_waits AS w
    WHERE w.job_id IN (SELECT d.job_id FROM {schema}.job_deps AS d WHERE d.upstream_id = ANY(ids))
    ORDER BY w.job_id
    FOR UPDATE;
    IF EXISTS (SELECT 1 FROM {schema}.job_deps AS d WHERE d.upstream_id = ANY(ids) AND d.job_id < 0) THEN
        PERFORM {schema}.batch_members_ended(ids, states);
    END IF;
    WITH RECURSIVE fin AS (
        SELECT u.id, u.state FROM unnest(ids, states) AS u(id, state)
        WHERE u.state IN ('succeeded', 'dead', 'cancelled')
    ), doomed(id, root, why) AS (
        SELECT d.job_id, f.id, f.state
        FROM fin AS f
        JOIN {schema}.job_deps AS d ON d.upstream_id = f.id
        JOIN {schema}.job_waits AS w ON w.job_id = d.job_id AND w.on_failure = 'cancel'
        WHERE f.state <> 'succeeded'
        UNION
        SELECT d.job_id, c.root, c.why
        FROM doomed AS c
        JOIN {schema}.job_deps AS d ON d.upstream_id = c.id
        JOIN {schema}.job_waits AS w ON w.job_id = d.job_id AND w.on_failure = 'cancel'
    ), cut AS (
        UPDATE {schema}.jobs AS j
        SET state = 'cancelled', finished_at = now(),
            last_error = 'upstream job ' || c.root || ' ended ' || c.why
        FROM (SELECT DISTINCT ON (id) id, root, why FROM doomed ORDER BY id, root) AS c
        WHERE j.id = c.id AND j.state = 'waiting'
        RETURNING j.id, c.root
    ), marked AS (
        UPDATE {schema}.job_waits AS w SET cancelled_by = c.root
        FROM cut AS c WHERE w.job_id = c.id
    ), gone AS (
        SELECT id, state <> 'succeeded' AS bad FROM fin
        UNION ALL
        SELECT id, true FROM cut
    ), counted AS (
        UPDATE {schema}.job_waits AS w
        SET pending = w.pending - g.n, failed = w.failed + g.bad
        FROM (SELECT d.job_id, count(*) AS n, count(*) FILTER (WHERE g.bad) AS bad
              FROM gone AS g JOIN {schema}.job_deps AS d ON d.upstream_id = g.id
              GROUP BY d.job_id) AS g
        WHERE w.job_id = g.job_id AND g.job_id NOT IN (SELECT id FROM doomed)
        RETURNING w.job_id, w.pending, w.failed, w.on_failure
    ), freed AS (
        UPDATE {schema}.jobs AS j SET state = 'queued', run_at = least(j.run_at, now())
        FROM counted AS c
        WHERE j.id = c.job_id AND j.state = 'waiting'
          AND c.pending <= 0 AND (c.failed = 0 OR c.on_failure = 'run')
        RETURNING j.queue
    )
    SELECT count(*) INTO woke
    FROM (SELECT pg_notify({channel}, q.queue) FROM (SELECT DISTINCT queue FROM freed) AS q) AS n;
END
$fn$;

-- app.retry of a dead or cancelled job: the dependents its ending cancelled
-- (cancelled_by) wait again, and the dependents that counted it, or one of
-- those, as ended and failed (on_failure='run'), and still wait, count it as
-- pending again.
CREATE FUNCTION {schema}.jobs_reopened(upstream bigint) RETURNS void
LANGUAGE plpgsql VOLATILE AS $fn$
DECLARE
    edge bigint;
    left_before integer;
BEGIN
    -- A member of a batch not yet finished counts as pending again (its shard
    -- first, then its batch: the order in which an ending locks them). Its
    -- ending counted it as failed (retry takes dead and cancelled jobs only).
    SELECT -d.job_id INTO edge FROM {schema}.job_deps AS d WHERE d.upstream_id = upstream AND d.job_id < 0;
    IF edge IS NOT NULL THEN
        UPDATE {schema}.batch_shards SET pending = pending + 1, failed = greatest(failed - 1, 0)
        WHERE batch_id = edge / 16 AND shard = edge % 16
        RETURNING pending - 1 INTO left_before;
        IF left_before = 0 THEN
            UPDATE {schema}.batches SET zeroed = zeroed - 1 WHERE id = edge / 16 AND finished_at IS NULL;
            IF NOT FOUND THEN  -- finished already: the member runs again on its own
                UPDATE {schema}.batch_shards SET pending = pending - 1, failed = failed + 1
                WHERE batch_id = edge / 16 AND shard = edge % 16;
            END IF;
        END IF;
    END IF;
    WITH back AS (
        UPDATE {schema}.jobs AS j
        SET state = 'waiting', finished_at = NULL, last_error = NULL
        FROM {schema}.job_waits AS w
        WHERE w.cancelled_by = upstream AND j.id = w.job_id AND j.state = 'cancelled'
        RETURNING j.id
    ), unmarked AS (
        UPDATE {schema}.job_waits AS w SET cancelled_by = NULL
        FROM back AS b WHERE w.job_id = b.id
    )
    UPDATE {schema}.job_waits AS w
    SET pending = w.pending + g.n, failed = greatest(w.failed - g.n, 0)
    FROM (SELECT d.job_id, count(*) AS n
          FROM {schema}.job_deps AS d
          WHERE d.upstream_id = upstream OR d.upstream_id IN (SELECT id FROM back)
          GROUP BY d.job_id) AS g
    JOIN {schema}.jobs AS j ON j.id = g.job_id
    WHERE w.job_id = g.job_id AND j.state = 'waiting' AND g.job_id NOT IN (SELECT id FROM back);
END
$fn$;

-- jobs_ended for the batch members among the ended jobs: each shard's count
-- down, then, for a batch whose last shard reached zero, the callbacks: the
-- on_complete one queued, the on_success one queued if every member
-- succeeded and cancelled otherwise.
CREATE FUNCTION {schema}.batch_members_ended(ids bigint[], states text[]) RETURNS void
LANGUAGE plpgsql VOLATILE AS $fn$
DECLARE
    done bigint[];
    b record;
    bad bigint;
BEGIN
    WITH m AS (
        SELECT (-d.job_id) / 16 AS batch_id, ((-d.job_id) % 16)::int AS shard, count(*) AS n,
               count(*) FILTER (WHERE u.state <> 'succeeded') AS bad
        FROM unnest(ids, states) AS u(id, state)
        JOIN {schema}.job_deps AS d ON d.upstream_id = u.id AND d.job_id < 0
        WHERE u.state IN ('succeeded', 'dead', 'cancelled')
        GROUP BY 1, 2
        ORDER BY 1, 2
    ), dec AS (
        UPDATE {schema}.batch_shards AS s SET pending = s.pending - m.n, failed = s.failed + m.bad
        FROM m WHERE s.batch_id = m.batch_id AND s.shard = m.shard
        RETURNING s.batch_id, s.pending
    ), zero AS (
        UPDATE {schema}.batches AS bt SET zeroed = bt.zeroed + z.n
        FROM (SELECT batch_id, count(*) AS n FROM dec WHERE pending <= 0 GROUP BY batch_id) AS z
        WHERE bt.id = z.batch_id
        RETURNING bt.id, bt.zeroed, bt.shards
    )
    SELECT array_agg(id) INTO done FROM zero WHERE zeroed >= shards;
    IF done IS NULL THEN
        RETURN;
    END IF;
    FOR b IN UPDATE {schema}.batches SET finished_at = now()
             WHERE id = ANY(done) AND finished_at IS NULL
             RETURNING id, on_complete, on_success LOOP
        SELECT coalesce(sum(failed), 0) INTO bad FROM {schema}.batch_shards WHERE batch_id = b.id;
        UPDATE {schema}.jobs SET state = 'queued', run_at = least(run_at, now())
        WHERE id = b.on_complete AND state = 'waiting';
        UPDATE {schema}.jobs
        SET state = CASE WHEN bad = 0 THEN 'queued' ELSE 'cancelled' END,
            finished_at = CASE WHEN bad = 0 THEN NULL ELSE now() END,
            last_error = CASE WHEN bad = 0 THEN NULL
                              ELSE 'batch ' || b.id || ': ' || bad || ' member(s) did not succeed' END
        WHERE id = b.on_success AND state = 'waiting';
        PERFORM pg_notify({channel}, j.queue) FROM {schema}.jobs AS j
        WHERE j.id IN (b.on_complete, b.on_success) AND j.state = 'queued';
    END LOOP;
END
$fn$;
