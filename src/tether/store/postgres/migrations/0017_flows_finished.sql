-- tether schema, version 17 (PostgreSQL): an ending statement says what it
-- finished and released (issue 42: the events workflow.finished and
-- batch.finished, emitted once by the process that ran the statement, and
-- the steps and callbacks it queued published on a delivering transport).
-- {schema} is a validated, quoted identifier filled in at load time.
--
-- A workflow run counts its steps not yet ended (open); the ending that takes
-- it to zero sets finished_at and names the run in its answer. A count under
-- the run's row lock, like job_waits' and batch_shards': two steps ending at
-- once on two workers serialize on the row, and READ COMMITTED re-reads it
-- for the second, so exactly one of them sees zero. A scan of the steps'
-- states would let each see the other's step still running.
ALTER TABLE {schema}.workflows
    ADD COLUMN open integer NOT NULL DEFAULT 0,
    ADD COLUMN finished_at timestamptz;
UPDATE {schema}.workflows AS w
SET open = (SELECT count(*) FROM {schema}.workflow_steps AS s JOIN {schema}.jobs AS j ON j.id = s.job_id
            WHERE s.workflow_id = w.id AND j.state IN ('waiting', 'queued', 'running'));
UPDATE {schema}.workflows SET finished_at = now() WHERE open = 0;

-- Every step gets an edge to job 0 (no job: ids start at 1, batch edges are
-- negative), so that the probe _ending makes for dependents finds a step that
-- nothing waits for too (the last step of a chain): its ending must count on
-- its run. The joins that follow edges to waiting jobs (job_waits, jobs) find
-- no row for it.
INSERT INTO {schema}.job_deps (upstream_id, job_id)
SELECT job_id, 0 FROM {schema}.workflow_steps
ON CONFLICT DO NOTHING;

-- jobs_ended and batch_members_ended now answer what they did, as JSON text
-- (NULL: nothing to say): {"workflows": [run ids finished], "batches": [batch
-- ids finished], "released": [[job id, queue], ...] the steps and callbacks
-- queued}. _ending hands it to the statement's answer (its last column).
DROP FUNCTION {schema}.jobs_ended(bigint[], text[]);
DROP FUNCTION {schema}.batch_members_ended(bigint[], text[]);

CREATE FUNCTION {schema}.batch_members_ended(ids bigint[], states text[]) RETURNS jsonb
LANGUAGE plpgsql VOLATILE AS $fn$
DECLARE
    done bigint[];
    b record;
    bad bigint;
    sent bigint;
    finished bigint[] := '{}';
    queued_now jsonb := '[]';
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
        RETURN NULL;
    END IF;
    -- finished_at IS NULL: the one statement that finishes the batch, under its row lock
    FOR b IN UPDATE {schema}.batches SET finished_at = now()
             WHERE id = ANY(done) AND finished_at IS NULL
             RETURNING id, on_complete, on_success LOOP
        finished := finished || b.id;
        SELECT coalesce(sum(failed), 0) INTO bad FROM {schema}.batch_shards WHERE batch_id = b.id;
        UPDATE {schema}.jobs SET state = 'queued', run_at = least(run_at, now())
        WHERE id = b.on_complete AND state = 'waiting';
        UPDATE {schema}.jobs
        SET state = CASE WHEN bad = 0 THEN 'queued' ELSE 'cancelled' END,
            finished_at = CASE WHEN bad = 0 THEN NULL ELSE now() END,
            last_error = CASE WHEN bad = 0 THEN NULL
                              ELSE 'batch ' || b.id || ': ' || bad || ' member(s) did not succeed' END
        WHERE id = b.on_success AND state = 'waiting';
        SELECT queued_now || coalesce(jsonb_agg(jsonb_build_array(j.id, j.queue)), '[]'),
               count(pg_notify({channel}, j.queue))
        INTO queued_now, sent
        FROM {schema}.jobs AS j
        WHERE j.id IN (b.on_complete, b.on_success) AND j.state = 'queued';
    END LOOP;
    RETURN jsonb_build_object('batches', to_jsonb(finished), 'released', queued_now);
END
$fn$;

CREATE FUNCTION {schema}.jobs_ended(ids bigint[], states text[]) RETURNS text
LANGUAGE plpgsql VOLATILE AS $fn$
DECLARE
    woke bigint;
    batched jsonb;
    freed jsonb;
    gone_ids bigint[];
    runs bigint[];
    finished bigint[];
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
        RETURN NULL;
    END IF;
    -- The direct dependents' count rows, locked in id order first: two
    -- statements ending jobs with dependents in common then queue on them in
    -- one order, never in a deadlock.
    PERFORM 1 FROM {schema}.job_waits AS w
    WHERE w.job_id IN (SELECT d.job_id FROM {schema}.job_deps AS d WHERE d.upstream_id = ANY(ids))
    ORDER BY w.job_id
    FOR UPDATE;
    IF EXISTS (SELECT 1 FROM {schema}.job_deps AS d WHERE d.upstream_id = ANY(ids) AND d.job_id < 0) THEN
        batched := {schema}.batch_members_ended(ids, states);
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
        RETURNING j.id, j.queue
    )
    SELECT (SELECT count(*) FROM (SELECT pg_notify({channel}, q.queue)
                                  FROM (SELECT DISTINCT queue FROM freed) AS q) AS n),
           (SELECT jsonb_agg(jsonb_build_array(f.id, f.queue)) FROM freed AS f),
           ARRAY(SELECT id FROM gone)
    INTO woke, freed, gone_ids;
    -- The runs of the steps that ended here (and of those cut): each counts
    -- them off its open steps, under its row lock, taken in id order (two
    -- statements ending steps of the same runs queue in one order). The
    -- statement that takes a run to zero finished it, once: finished_at.
    SELECT array_agg(DISTINCT s.workflow_id) INTO runs
    FROM {schema}.workflow_steps AS s WHERE s.job_id = ANY(gone_ids);
    IF runs IS NOT NULL THEN
        PERFORM 1 FROM {schema}.workflows WHERE id = ANY(runs) ORDER BY id FOR UPDATE;
        WITH n AS (
            SELECT s.workflow_id, count(*) AS n FROM {schema}.workflow_steps AS s
            WHERE s.job_id = ANY(gone_ids) GROUP BY s.workflow_id
        ), down AS (
            UPDATE {schema}.workflows AS w
            SET open = w.open - n.n, finished_at = CASE WHEN w.open - n.n <= 0 THEN now() END
            FROM n WHERE w.id = n.workflow_id AND w.finished_at IS NULL
            RETURNING w.id, w.open
        )
        SELECT array_agg(id ORDER BY id) INTO finished FROM down WHERE open <= 0;
    END IF;
    IF finished IS NULL AND freed IS NULL AND batched IS NULL THEN
        RETURN NULL;
    END IF;
    RETURN jsonb_build_object(
        'workflows', coalesce(to_jsonb(finished), '[]'),
        'batches', coalesce(batched -> 'batches', '[]'),
        'released', coalesce(freed, '[]') || coalesce(batched -> 'released', '[]'))::text;
END
$fn$;

-- app.retry of a step counts it (and the steps its ending cancelled, which
-- wait again) as open on its run again; a finished run is unfinished by it,
-- and its next finish is announced again.
CREATE OR REPLACE FUNCTION {schema}.jobs_reopened(upstream bigint) RETURNS void
LANGUAGE plpgsql VOLATILE AS $fn$
DECLARE
    edge bigint;
    left_before integer;
    back_ids bigint[];
BEGIN
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
    ), recounted AS (
        UPDATE {schema}.job_waits AS w
        SET pending = w.pending + g.n, failed = greatest(w.failed - g.n, 0)
        FROM (SELECT d.job_id, count(*) AS n
              FROM {schema}.job_deps AS d
              WHERE d.upstream_id = upstream OR d.upstream_id IN (SELECT id FROM back)
              GROUP BY d.job_id) AS g
        JOIN {schema}.jobs AS j ON j.id = g.job_id
        WHERE w.job_id = g.job_id AND j.state = 'waiting' AND g.job_id NOT IN (SELECT id FROM back)
    )
    SELECT ARRAY(SELECT id FROM back) INTO back_ids;
    UPDATE {schema}.workflows
    SET open = open + 1 + cardinality(back_ids), finished_at = NULL
    WHERE id = (SELECT workflow_id FROM {schema}.workflow_steps WHERE job_id = upstream);
END
$fn$;
