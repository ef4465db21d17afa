-- tether's named queries for PostgreSQL.
--
-- {schema} is the validated, quoted schema; {now} is the one clock expression,
-- coalesce(%(now)s::timestamptz, now()): the database's clock, unless a test
-- passes its own. Every fenced statement matches the job on
--   id AND attempt AND locked_by AND state = 'running'
-- so a zombie (an attempt whose lease lapsed and was reaped, or re-claimed,
-- even by the same worker id) matches nothing and changes nothing.

-- name: enqueue
-- Many rows, one statement: the columns arrive as arrays and unnest into rows.
-- ON CONFLICT names the partial dedup index (migration 0014), so a job whose
-- key an active job holds, or a finished job inside its dedup window, inserts
-- nothing; the caller looks that job's id up by key (dedup_holders).
-- job_insert_* are the columns a NewJob fills (store/columns.py: INSERTED),
-- in one order in each list; run_at (the given time or now plus delay) and
-- created_at are worked out here.
INSERT INTO {schema}.jobs (run_at, created_at, {job_insert_columns})
SELECT coalesce(n.run_at, {now} + make_interval(secs => n.delay)), {now}, {job_insert_unnested}
FROM unnest(%(run_at)s::timestamptz[], %(delay)s::float8[], {job_insert_arrays})
     WITH ORDINALITY AS n(run_at, delay, {job_insert_columns}, ord)
ORDER BY n.ord
ON CONFLICT (dedup_key) WHERE dedup_key IS NOT NULL AND (state IN ('queued', 'running') OR dedup_for IS NOT NULL)
DO NOTHING
RETURNING id, dedup_key

-- name: enqueue_one
-- The same insert for one job, with plain parameters: building and unnesting
-- a dozen one-element arrays cost more than the insert itself, and one job per
-- call is how most producers enqueue.
INSERT INTO {schema}.jobs (run_at, created_at, {job_insert_columns})
VALUES (coalesce(%(run_at)s::timestamptz, {now} + make_interval(secs => %(delay)s::float8)), {now},
        {job_insert_params})
ON CONFLICT (dedup_key) WHERE dedup_key IS NOT NULL AND (state IN ('queued', 'running') OR dedup_for IS NOT NULL)
DO NOTHING
RETURNING id, dedup_key

-- name: enqueue_uniform
-- Many jobs that share every option and have no dedup key (what enqueue_many
-- sends): the options go once, as plain parameters, and the args as one JSON
-- array, instead of a dozen arrays whose elements the driver escapes one by one
-- (most of a bulk enqueue's client CPU). Ids follow the array's order.
-- job_insert_shared is job_insert_params with each row's args (a.value).
INSERT INTO {schema}.jobs (run_at, created_at, {job_insert_columns})
SELECT coalesce(%(run_at)s::timestamptz, {now} + make_interval(secs => %(delay)s::float8)), {now},
       {job_insert_shared}
FROM jsonb_array_elements(%(args)s::jsonb) WITH ORDINALITY AS a(value, ord)
ORDER BY a.ord
RETURNING id, dedup_key

-- name: dedup_holders
-- For an enqueue's dedup hits: the job holding each key, active or inside its
-- dedup window (finished less than dedup_for seconds ago). A finished job whose
-- window has passed is released here (dedup_for = NULL takes it out of
-- jobs_dedup_idx) and not returned, so the caller inserts again. Its
-- SELECT reads the statement's snapshot, so it judges the window itself
-- rather than trust dedup_for: a holder another enqueue released meanwhile is
-- not returned either (that enqueue's new job is found on the next try). A
-- job with a window that has not finished holds its key in any state.
WITH released AS (
    UPDATE {schema}.jobs SET dedup_for = NULL
    WHERE dedup_key = ANY(%(keys)s::text[]) AND dedup_for IS NOT NULL AND state NOT IN ('queued', 'running')
      AND finished_at + make_interval(secs => dedup_for) <= {now}
)
SELECT id, dedup_key FROM {schema}.jobs
WHERE dedup_key = ANY(%(keys)s::text[])
  AND (state IN ('queued', 'running')
       OR (dedup_for IS NOT NULL
           AND (finished_at IS NULL OR finished_at + make_interval(secs => dedup_for) > {now})))

-- name: _grant_lease
-- The lease grant that claim and claim_ids share (UPDATE jobs AS j ...): running,
-- attempt + 1 (the fencing token), owner, lease_until capped at the attempt's
-- deadline so one partial index finds both lapsed leases and timed-out attempts.
-- The rows are found by the ctids picked locked (a TID scan): no index lookup
-- per job. A locked row cannot move: only its locker can update it until the
-- statement commits, and FOR UPDATE hands back the version it locked, the
-- newest. (Were a ctid ever stale, its row would match nothing: not claimed,
-- still queued, unlocked at commit.) By id, the primary key was probed once
-- per job, past the versions each earlier claim and completion left in it:
-- about 0.8 us of PostgreSQL CPU per job of a claim of 100.
-- args, meta and trace go back as JSON text: the worker decodes a whole claim's args
-- in one json.loads (store/rows.py), where psycopg's loader ran once per row.
SET state = 'running',
    attempt = j.attempt + 1,
    locked_by = %(worker)s,
    claimed_at = {now},
    deadline = {now} + make_interval(secs => j.timeout),
    lease_until = {now} + make_interval(secs => LEAST(coalesce(j.lease_ttl, %(lease_ttl)s), j.timeout)),
    cancel_requested = false,
    progress = NULL,
    progress_message = NULL
WHERE j.ctid = ANY(ARRAY(SELECT ctid FROM picked))
RETURNING j.id, j.attempt, j.task, j.args::text, j.queue, j.priority, j.max_attempts,
          coalesce(j.lease_ttl, %(lease_ttl)s) AS lease_ttl, j.timeout, j.claimed_at, j.meta::text, j.run_at,
          j.scheduled_for, j.trace::text

-- name: _key_free
-- (A condition on a queued row of jobs, read unaliased, for the claims.) Its
-- exclusive key, if it has one, is free, and the row is the key's first
-- queued, due job (priority, then run_at, then id), as on SQLite. In order:
-- - A key that a running job held when the statement began (other than one
--   this statement finishes, as key_free counts them: its attempt and worker
--   are in %(done)s) is passed over by one probe of jobs_exclusive_running's
--   index, where key_free's lock and query cost 6.6 us for each queued job of
--   a held key that a claim's walk reads (666 ms a claim behind 100,000).
-- - A job behind another of its key is passed over by one seek of
--   jobs_exclusive_queued_idx (migration 0009). Without this, every queued
--   job of a free key passed; the walk's LIMIT filled with a few keys' bursts
--   and picked kept one of each: a claim of 10 over bursts of 5 took 2.
-- - key_free (migration 0007) then takes the key's advisory lock and looks for
--   its running job with a fresh snapshot: it alone decides. The two probes
--   above read the statement's snapshot and are only shortcuts: a key freed,
--   or a job enqueued ahead, after the statement began waits for the next
--   claim, as it would have for a claim begun a moment earlier.
-- - Its limit key, if it has one, has room: key_take (migration 0016) takes
--   one of it. Last, so a row the exclusive-key tests pass over spends none.
--   Rows without a key pay one IS NULL test; no function is called for them.
CASE WHEN jobs.exclusive_key IS NULL THEN true
     WHEN EXISTS (SELECT 1 FROM {schema}.jobs AS h
                  WHERE h.exclusive_key = jobs.exclusive_key AND h.state = 'running'
                    AND (h.attempt IS DISTINCT FROM (%(done)s::jsonb -> h.id::text ->> 0)::int
                         OR h.locked_by IS DISTINCT FROM %(worker)s)) THEN false
     WHEN jobs.id <> (SELECT f.id FROM {schema}.jobs AS f
                      WHERE f.exclusive_key = jobs.exclusive_key AND f.state = 'queued' AND f.run_at <= {now}
                      ORDER BY f.priority DESC, f.run_at, f.id LIMIT 1) THEN false
     ELSE {schema}.key_free(jobs.exclusive_key, %(done)s::jsonb, %(worker)s) END
AND (jobs.limit_key IS NULL OR {schema}.key_take(jobs.limit_key, %(now)s, %(done)s::jsonb, %(worker)s))

-- name: _open_queues
-- The worker's queues that a claim may take jobs from: those of %(queues)s
-- not paused (the queues table: app.pause), a FROM item (alias it) of one
-- column, name. Every claim and the transport sweep read their jobs through
-- it, so "claimable" means the same everywhere: queued, due (run_at <= now),
-- on one of these queues. Paused queues are left out of the list before any
-- of their rows is read or locked: one read of that tiny table per statement
-- (an InitPlan). The state test stays in each query, spelled as that query's
-- index needs it (state = 'queued', or coalesce/nullif to keep the planner
-- off an index whose predicate it would otherwise match: each query says why).
(SELECT u.name FROM unnest(%(queues)s::text[]) AS u(name)
 WHERE u.name <> ALL(ARRAY(SELECT queue FROM {schema}.queues WHERE paused)))

-- name: _due
-- (A condition on a queued row of jobs, unaliased.) Due, and not expired: a
-- job is claimable from its run_at up to and including its expires_at (issue
-- 44; NULL: never expires), so an expired job is never started, whatever the
-- expiry service has swept yet. One BETWEEN, not a second comparison of its
-- own: the claim statements sit at psycopg's 4,096-character parse cache
-- (tests/test_sqlfile.py). It is the same run_at <= now for the planner
-- (BETWEEN is parsed into run_at <= now AND now <= coalesce(...)), so the
-- claim indexes serve it as before, the expiry a filter on the rows they hand
-- over (tests/test_expiry.py checks the plan).
{now} BETWEEN run_at AND coalesce(expires_at, 'infinity')

-- name: _limits
-- (A CTE for the claims' WITH lists: limits.) The room of each limited queue
-- of the claim (claim_room: migration 0007 says why a function), as (limited,
-- room) rows; a queue without limits has none. The function is not even
-- called, nor any lock taken, unless one of the worker's queues has a limit
-- (a one-time filter). %(done)s: the successes the same statement records
-- (NULL for a claim alone), which claim_room counts as finished.
limits AS (
    SELECT r.limited, r.room FROM {schema}.claim_room(%(queues)s::text[], {now}, %(done)s::jsonb, %(worker)s) AS r
    WHERE EXISTS (SELECT 1 FROM {schema}.queues AS l
                  WHERE l.queue = ANY(%(queues)s::text[])
                    AND (l.concurrency IS NOT NULL OR l.rate_limit IS NOT NULL))
)

-- name: _claim_picked
-- The choice of jobs that claim and complete_and_claim share (two CTEs,
-- candidates and picked, for a WITH list).
-- One queue at a time (LATERAL over the worker's queues), because only an
-- equality on queue lets jobs_claim_idx (queue, priority DESC, run_at, id) hand
-- rows over already in order, so the scan stops after `limit` rows however long
-- the backlog; `queue = ANY(...)` would read and sort every due job instead.
-- SKIP LOCKED lets concurrent claimers pass over rows another claim is taking
-- instead of queueing behind it. With several queues each may lock up to
-- `limit` rows; only the best `limit` are taken, the rest are unlocked when the
-- statement ends.
-- Paused queues are left out of the list (_open_queues) and limited queues
-- give no more than their room (_limits). `c.*` (here and in _known) is the
-- lateral's own five columns, spelled short: the statements that include
-- this sit at psycopg's 4,096-character parse cache (tests/test_sqlfile.py).
{_limits}, candidates AS (
    SELECT c.*
    FROM (SELECT o.name, coalesce((SELECT room FROM limits WHERE limited = o.name), %(limit)s) AS room
          FROM {_open_queues} AS o) AS q
    CROSS JOIN LATERAL (
        SELECT ctid, id, priority, run_at, exclusive_key FROM {schema}.jobs
        WHERE state = 'queued' AND queue = q.name AND {_due}
          AND {_key_free}
        ORDER BY priority DESC, run_at, id
        LIMIT least(%(limit)s, q.room)
        FOR UPDATE SKIP LOCKED
    ) AS c
), picked AS (
    -- jobs without a key, and the first job of each key (two of one key in one
    -- claim both passed key_free, whose lock is this claim's own)
    SELECT p.ctid FROM (
        SELECT ctid, priority, run_at, id FROM candidates WHERE exclusive_key IS NULL
        UNION ALL
        SELECT * FROM (SELECT DISTINCT ON (exclusive_key) ctid, priority, run_at, id FROM candidates
                       WHERE exclusive_key IS NOT NULL
                       ORDER BY exclusive_key, priority DESC, run_at, id) AS k
    ) AS p
    ORDER BY p.priority DESC, p.run_at, p.id LIMIT %(limit)s
)

-- name: _claim_picked_known
-- _claim_picked for a worker that says which tasks it knows: one (queue,
-- task) pair at a time over jobs_claim_task_idx (queue, task, priority DESC,
-- run_at, id), for the reason _claim_picked walks one queue at a time: an
-- equality on both leading keys hands rows over in claim order, so each pair
-- stops after `limit` rows. A filter `task = ANY(...)` on the queue's walk
-- would read (and, with a heap fetch each, check) every job of a task the
-- worker does not know that sits ahead of its own, on every claim: another
-- app's backlog on a shared queue, or a new task's in a rolling deploy. Here
-- those rows are never read. A pair with no queued job costs one index
-- descent; as with several queues, each pair with a backlog may lock up to
-- `limit` rows, of which the best `limit` are taken. `coalesce(state, '')`
-- (state is NOT NULL: the same test) matches jobs_claim_task_idx's predicate
-- and not jobs_claim_idx's, so the planner cannot walk the queue's index and
-- filter by task instead (it did, on a table without statistics; migration
-- 0006 says more). Paused queues are left out of the list, as in _claim_picked.
{_limits}, candidates AS (
    SELECT c.*
    FROM (SELECT o.name, coalesce((SELECT room FROM limits WHERE limited = o.name), %(limit)s) AS room
          FROM {_open_queues} AS o) AS q
    CROSS JOIN LATERAL (
        -- a queue's pairs together take no more than its room
        SELECT p.*
        FROM unnest(%(tasks)s::text[]) AS t(name)
        CROSS JOIN LATERAL (
            SELECT ctid, id, priority, run_at, exclusive_key FROM {schema}.jobs
            WHERE coalesce(state, '') = 'queued' AND queue = q.name AND task = t.name AND {_due}
                AND {_key_free}
            ORDER BY priority DESC, run_at, id
            LIMIT least(%(limit)s, q.room)
            FOR UPDATE SKIP LOCKED
        ) AS p
        ORDER BY p.priority DESC, p.run_at, p.id
        LIMIT least(%(limit)s, q.room)
    ) AS c
), picked AS (
    -- jobs without a key, and the first job of each key (two of one key in one
    -- claim both passed key_free, whose lock is this claim's own)
    SELECT p.ctid FROM (
        SELECT ctid, priority, run_at, id FROM candidates WHERE exclusive_key IS NULL
        UNION ALL
        SELECT * FROM (SELECT DISTINCT ON (exclusive_key) ctid, priority, run_at, id FROM candidates
                       WHERE exclusive_key IS NOT NULL
                       ORDER BY exclusive_key, priority DESC, run_at, id) AS k
    ) AS p
    ORDER BY p.priority DESC, p.run_at, p.id LIMIT %(limit)s
)

-- name: _record_starts
-- A claim's starts in rate-limited queues, for claim_room's sliding window
-- (a CTE for the claim statements' WITH lists). Other queues write nothing.
starts AS (
    INSERT INTO {schema}.queue_starts (queue, started_at)
    SELECT c.queue, c.claimed_at FROM claimed AS c
    WHERE c.queue = ANY(ARRAY(SELECT queue FROM {schema}.queues WHERE rate_limit IS NOT NULL))
)

-- name: claim
-- The jobs _claim_picked chooses; the same UPDATE grants the lease (locked_by,
-- lease_until) and bumps attempt, the fencing token. lease_until is capped at
-- the attempt's deadline so one partial index finds both lapsed leases and
-- timed-out attempts.
WITH {_claim_picked}, claimed AS (
    UPDATE {schema}.jobs AS j
    {_grant_lease}
), {_record_starts}
SELECT * FROM claimed

-- name: claim_known
-- claim, of the tasks the worker knows only (_claim_picked_known): a job of
-- any other task stays queued, its budget untouched, for a worker that knows it.
WITH {_claim_picked_known}, claimed AS (
    UPDATE {schema}.jobs AS j
    {_grant_lease}
), {_record_starts}
SELECT * FROM claimed

-- name: _claim_ids_picked
-- The choice of delivered jobs that claim_ids and complete_and_claim_ids
-- share (three CTEs, limits, locked and picked, for a WITH list).
-- A transport (NATS) delivered these ids (%(delivered)s); the database decides
-- who owns them. Only a job still queued, due and on one of the worker's
-- queues is locked: a job someone else holds (running), a finished one, one
-- not due yet, or one of a task the worker does not know (tasks, when given)
-- matches nothing, and the caller skips it. Two workers handed the same id:
-- the second's FOR UPDATE waits for the first, re-checks the WHERE on the new
-- row version (running now) and takes nothing. Rows are locked in id order,
-- so two claims over overlapping id sets cannot deadlock; no SKIP LOCKED,
-- because a skipped row would be a delivered job nobody claimed. A job on a
-- paused queue is not claimed either: the sweep delivers it again once its
-- queue is resumed. %(done)s: the successes the same statement records (NULL
-- for claim_ids), which claim_room and key_free count as finished.
-- `nullif(state, '') = 'queued'` (state is never '': the same test) matches
-- neither claim index's predicate (jobs_claim_idx's state = 'queued',
-- jobs_claim_task_idx's coalesce spelling), so the primary key is the only
-- index this lookup can use. Spelled state = 'queued', a generic plan made on
-- a table without statistics (a fresh schema, a bulk enqueue before
-- autovacuum's ANALYZE) walked jobs_claim_idx and filtered every queued job
-- of the queue for the few delivered ones; made once per connection, that
-- plan stayed: 41 ms a claim against a backlog of 60,000 instead of 1.
{_limits}, locked AS (
    SELECT ctid, id, queue, exclusive_key FROM {schema}.jobs
    WHERE id = ANY(%(delivered)s::bigint[]) AND nullif(state, '') = 'queued'
      AND queue = ANY(ARRAY(SELECT name FROM {_open_queues} AS o)) AND {_due}
      AND (%(tasks)s::text[] IS NULL OR task = ANY(%(tasks)s::text[]))
      AND {_key_free}
    ORDER BY id
    FOR UPDATE
), picked AS (
    -- a limited queue's delivered ids up to its room (lowest ids first), and
    -- one job per exclusive key; the rest stay queued, and the sweep delivers
    -- them again (its message id names a period: worker/sweeper.py)
    SELECT n.ctid FROM (
        SELECT k.ctid, k.queue, row_number() OVER (PARTITION BY k.queue ORDER BY k.id) AS nth
        FROM (SELECT DISTINCT ON (exclusive_key IS NULL, coalesce(exclusive_key, id::text)) ctid, id, queue
              FROM locked ORDER BY exclusive_key IS NULL, coalesce(exclusive_key, id::text), id) AS k
    ) AS n
    WHERE n.nth <= coalesce((SELECT room FROM limits WHERE limited = n.queue), n.nth)
)

-- name: claim_ids
-- The same grant as claim, for the delivered rows _claim_ids_picked chooses.
WITH {_claim_ids_picked}, claimed AS (
    UPDATE {schema}.jobs AS j
    {_grant_lease}
), {_record_starts}
SELECT * FROM claimed

-- name: complete_and_claim_ids
-- A delivering transport's round: the successes since the worker's last
-- claim and its claim of the delivered ids, in one statement and one commit,
-- as complete_and_claim is for claim. The two UPDATEs never touch the same
-- row (ended matches rows running under this worker, locked only queued
-- ones, both as of the statement's one snapshot), which is what lets them
-- share a statement; claim_room and key_free are told of the successes, so a
-- success frees its queue's slot and its exclusive key for this very claim.
-- Answer as complete_and_claim's (_round_answer).
WITH {_end_successes}, {_claim_ids_picked}, claimed AS (
    UPDATE {schema}.jobs AS j
    {_grant_lease}
), {_record_starts}
{_round_answer}

-- name: due_unclaimed
-- The transport sweep: queued jobs that are due and that no delivery seems to
-- be carrying: due for longer than the grace period (the publish after
-- enqueue failed, or the message was lost), or due later than they were
-- created (delayed jobs and retries, which nothing publishes until they are
-- due; an immediate job's run_at is exactly its created_at, one now() in one
-- transaction). One queue at a time over jobs_claim_idx, as claim does, bounded.
-- Paused queues are skipped: no claim would take their jobs.
SELECT c.id, c.queue, c.attempt, c.run_at
FROM {_open_queues} AS q
CROSS JOIN LATERAL (
    SELECT id, queue, attempt, run_at, priority FROM {schema}.jobs
    WHERE state = 'queued' AND queue = q.name AND {_due}
      AND (run_at <= {now} - make_interval(secs => %(grace)s) OR run_at > created_at)
    ORDER BY priority DESC, run_at, id
    LIMIT %(limit)s
) AS c
ORDER BY c.priority DESC, c.run_at, c.id
LIMIT %(limit)s

-- name: heartbeat
-- One statement per worker per tick, however many jobs it holds: the held
-- (id, attempt) pairs arrive as two arrays. A pair whose fence fails is simply
-- not returned, which the worker reads as "lost". The workers row is touched in
-- the same statement so `tether status` sees the worker alive.
-- The lease is capped at the attempt's deadline (claimed_at + timeout). At or
-- past the deadline a renewal would set lease_until to a moment already gone,
-- so such a row is left out as well: the fence still holds, but there is
-- nothing left to renew, and answering "renewed" would tell the worker it owns
-- a lease the reaper is about to time out. Left out, it reads as "lost", and
-- the row is not written at all (NULL deadline: no timeout, nothing to cap).
WITH seen AS (
    UPDATE {schema}.workers SET last_seen = {now} WHERE id = %(worker)s
)
UPDATE {schema}.jobs AS j
SET lease_until = LEAST({now} + make_interval(secs => coalesce(j.lease_ttl, %(lease_ttl)s)),
                        j.deadline)
FROM unnest(%(ids)s::bigint[], %(attempts)s::int[]) AS h(id, attempt)
WHERE j.id = h.id AND j.attempt = h.attempt
  AND j.locked_by = %(worker)s AND j.state = 'running'
  AND (j.deadline IS NULL OR j.deadline > {now})
RETURNING j.id, j.cancel_requested

-- name: progress
-- Progress is a heartbeat: same fence, same lease extension, and the same
-- refusal at or past the attempt's deadline (no lease is left to extend; the
-- caller raises StaleAttempt and the reaper times the attempt out).
UPDATE {schema}.jobs
SET progress = %(fraction)s,
    progress_message = %(message)s,
    lease_until = LEAST({now} + make_interval(secs => coalesce(lease_ttl, %(lease_ttl)s)), deadline)
WHERE id = %(id)s AND attempt = %(attempt)s AND locked_by = %(worker)s AND state = 'running'
  AND (deadline IS NULL OR deadline > {now})
RETURNING cancel_requested

-- name: _ending
-- What every job ending does, in the statement that ends the job (issue 48;
-- DESIGN.md section 2): a CTE for a WITH list, after a CTE named `ended`
-- that is the statement's UPDATE of the jobs it moved, returning at least
-- their id and new state. The statement's answer reads FROM _ended (the
-- fragment below), which runs it. Every statement that can set a terminal
-- state includes this, and tests/test_ending.py fails if one does not (it
-- parses both queries.sql).
-- woken:  what an ending does for the jobs now finished that someone waits for
--         (app.wait's wake-up: migration 0008) and for the ended jobs that
--         have dependents (issue 42, I9: the workflow steps and batch
--         callbacks waiting for them are released or cancelled, in this
--         statement, so exactly once and fenced like it): jobs_ended()
--         (migration 0012), called once per statement with the rows that need
--         it, and never for a plain job while nobody waits: the uncorrelated
--         EXISTS tests are one-time probes of tables that are empty then, and
--         the correlated one is one index probe of job_deps per ended job
--         while workflows exist. It was the notification's SQL itself before;
--         as a call it also keeps complete_and_claim_known under psycopg's
--         4,096-character parse cache (test_sqlfile.py).
-- Why CTEs and not a trigger on jobs: measured (bench/ending_ab.py; the
-- commit that made this has the numbers), a row trigger WHEN the state
-- becomes terminal cost 16-22% more PostgreSQL CPU on a round of
-- complete_and_claim of 100 or 200 jobs (a function call per job). A
-- statement-level AFTER UPDATE trigger with transition tables cost the same
-- as these CTEs within the noise of a shared machine (-3% to +5%), but it
-- fires, and captures every row the statement updated, on every UPDATE of
-- jobs (claims and heartbeats too: PostgreSQL allows no column list on a
-- trigger with transition tables), and it cannot see a failure's traceback,
-- which the attempts row needs, so the audit would stay in each statement.
woken AS (
    SELECT {schema}.jobs_ended(array_agg(e.id), array_agg(e.state::text)) AS f FROM ended AS e
    WHERE EXISTS (SELECT 1 FROM {schema}.waiters)
       OR (EXISTS (SELECT 1 FROM {schema}.job_deps)
           AND EXISTS (SELECT 1 FROM {schema}.job_deps AS d WHERE d.upstream_id = e.id))
    HAVING count(*) > 0
)

-- name: _attempt_ending
-- _ending for the statements that end an attempt otherwise than in success
-- (fail, release, reap), whether or not the job ends with it: the attempt's
-- row in the attempts table (audit), written in the statement that fenced
-- it, then _ending. `ended` returns, besides id and state: outcome, attempt,
-- worker, claimed_at, error, traceback. A success writes no attempts row (its
-- job row is its audit: _fenced_success), and a queued job cancelled or
-- buried ran no attempt, so their statements include _ending alone: an
-- INSERT into attempts that inserts nothing still opens the table and its
-- indexes, about 4% of a single complete's CPU (bench/ending_ab.py).
audit AS (
    INSERT INTO {schema}.attempts (job_id, attempt, worker, claimed_at, finished_at, outcome, error, traceback)
    SELECT e.id, e.attempt, e.worker, e.claimed_at, {now}, e.outcome, e.error, e.traceback FROM ended AS e
), {_ending}

-- name: _ended
-- The FROM item of an ending statement's answer: its ended rows, joined to
-- the count of woken's rows so that woken runs (a CTE that is not read is not
-- run; the count is one row, whatever was done).
ended CROSS JOIN (SELECT min(f) AS f FROM woken) AS w

-- name: _fenced_success
-- The fenced success that complete and complete_and_claim share (the body of
-- their `ended` CTE: _end_successes): each row matches only while it is still
-- running under this worker and this attempt, so a zombie's late success changes nothing. The
-- rows are found by `id = ANY(...)` (an index condition on the primary key);
-- each one's own attempt and result are read from one jsonb object keyed by
-- id, {"<id>": [attempt] or [attempt, result]}: a lookup in a jsonb object is
-- a binary search over its keys, so a batch of n costs n log n whatever the
-- plan. The arrays it replaced were read with array_position, a linear search
-- run twice per row (n squared: 1.2 ms of a 3.5 ms complete of 200). No join
-- with unnest(...) either: these statements run with generic plans
-- (store.GENERIC_PLANS), and a plan made for arrays of unknown size joined
-- them as a nested loop that rescanned the array for every row (4 ms of a
-- 100-job round). `-> 1` of a one-element array is SQL NULL: a job with no
-- result, as distinct from a JSON null one.
-- `coalesce(j.state, '')` (state is NOT NULL: the same test) keeps the
-- planner off jobs_reap_idx, whose predicate it would otherwise match: with
-- few running rows at ANALYZE time it chose that index and filtered every
-- running job of every worker, where the primary key finds just these.
-- A job that reported progress ends at 1 (100%), not at its last report.
-- The success's audit is the row itself (no _attempt_ending): locked_by stays (the worker whose
-- attempt succeeded), with attempt, claimed_at and finished_at beside it, and
-- get_attempts, recent_attempts and throughput read it from there. An INSERT
-- into attempts per success cost about 12% of PostgreSQL's CPU and 17% of
-- the WAL per no-op job (its heap row, its primary key entry, its BRIN range).
-- Succeeded is terminal (retry takes dead and cancelled jobs only), so the
-- row keeps saying what it says until retention deletes it. Successes written
-- before this (and by a worker of an older release during a rolling deploy)
-- have their attempts row and locked_by NULL; the readers take those as before.
UPDATE {schema}.jobs AS j
SET state = 'succeeded',
    result = %(done)s::jsonb -> j.id::text -> 1,
    progress = CASE WHEN j.progress IS NULL THEN NULL ELSE 1 END,
    finished_at = {now},
    lease_until = NULL,
    deadline = NULL
WHERE j.id = ANY(%(ids)s::bigint[])
  AND j.attempt = (%(done)s::jsonb -> j.id::text ->> 0)::int
  AND j.locked_by = %(worker)s AND coalesce(j.state, '') = 'running'
RETURNING j.id, j.state

-- name: _end_successes
-- Successes (complete, and the rounds that carry them: complete_and_claim, its
-- _known and _ids variants): the fenced rows (ended), as the CTE the
-- statement's claim follows and its answer reads, and what every ending does
-- (_ending).
ended AS (
{_fenced_success}
), {_ending}

-- name: complete
-- Many completions, one statement, each row still fenced on its own attempt;
-- the rows that matched are the successes' audit (_fenced_success).
WITH {_end_successes}
SELECT id, w.f FROM {_ended}

-- name: complete_and_claim
-- A worker's usual round trip: the successes since its last claim, and its
-- next claim, in one statement and one commit rather than two. The two UPDATEs
-- never touch the same row (ended matches rows running under this worker, the
-- claim only queued ones), which is what lets them share a statement. Answer:
-- one row per claimed job (kind 0, as claim returns them) and one per accepted
-- completion (kind 1, its id); an id sent but not answered failed its fence.
WITH {_end_successes}, {_claim_picked}, claimed AS (
    UPDATE {schema}.jobs AS j
    {_grant_lease}
), {_record_starts}
{_round_answer}

-- name: _round_answer
-- complete_and_claim's answer (and complete_and_claim_known's): the claimed
-- rows (kind 0) and the accepted ids (kind 1), padded to the claimed rows' width.
-- The kind column is read by position and left unnamed: complete_and_claim_known
-- sits at psycopg's 4,096-character limit for caching a statement's parse
-- (sqlfile.py), and one more claimed column (trace) took it past.
SELECT 0, claimed.*, NULL FROM claimed
UNION ALL
SELECT 1, id, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, w.f
FROM {_ended}

-- name: complete_and_claim_known
-- complete_and_claim whose claim takes only the tasks the worker knows
-- (_claim_picked_known); otherwise the same statement.
WITH {_end_successes}, {_claim_picked_known}, claimed AS (
    UPDATE {schema}.jobs AS j
    {_grant_lease}
), {_record_starts}
{_round_answer}

-- name: fail
-- The retry-or-dead choice: a cancelled attempt, or any attempt of a job with a
-- pending cancel request, ends the job cancelled (as release and reap do: the
-- handler may fail before it hears of the request, and a retry would lose the
-- operator's cancel, since the next claim clears cancel_requested); a spent
-- budget (attempt - released >= max_attempts) or a non-retryable error ends it
-- dead; otherwise back to queued after an exponential backoff with jitter
-- (half fixed, half random), capped at an hour, or after %(delay)s seconds
-- when the task's own retry_backoff (a callable) chose them.
-- A snooze (outcome 'snoozed': the handler raised tether.Retry(delay)) is a
-- hand-back, not a failure: queued again at now + delay with released + 1, as
-- release does, so the claim that follows does not spend the budget; but
-- only while the job has been handed back fewer than %(max_released)s times
-- (issue 41: a worker token snoozed one job 300 times in 2 s). Past it a
-- snooze is a failure like any other: it spends the budget.
WITH ended AS (
    UPDATE {schema}.jobs AS j
    SET state = CASE
            WHEN %(outcome)s = 'cancelled' OR j.cancel_requested THEN 'cancelled'
            WHEN (%(outcome)s = 'snoozed' AND j.released < %(max_released)s) THEN 'queued'
            WHEN NOT %(retry)s OR j.attempt - j.released >= j.max_attempts THEN 'dead'
            ELSE 'queued' END,
        run_at = CASE
            WHEN %(outcome)s = 'cancelled' OR j.cancel_requested THEN j.run_at
            WHEN (%(outcome)s = 'snoozed' AND j.released < %(max_released)s) THEN {now} + make_interval(secs => coalesce(%(delay)s::float8, 0))
            WHEN NOT %(retry)s OR j.attempt - j.released >= j.max_attempts THEN j.run_at
            ELSE {now} + make_interval(secs => coalesce(
                %(delay)s::float8,
                LEAST(3600, j.backoff_base * power(2, j.attempt - j.released - 1)) * (0.5 + random() * 0.5)))
            END,
        released = CASE WHEN (%(outcome)s = 'snoozed' AND j.released < %(max_released)s) AND NOT j.cancel_requested
                        THEN j.released + 1 ELSE j.released END,
        finished_at = CASE
            WHEN %(outcome)s = 'cancelled' OR j.cancel_requested THEN {now}
            WHEN (%(outcome)s = 'snoozed' AND j.released < %(max_released)s) THEN NULL
            WHEN NOT %(retry)s OR j.attempt - j.released >= j.max_attempts THEN {now} END,
        -- a snooze is no error: the job's last one stays what it was
        last_error = CASE WHEN (%(outcome)s = 'snoozed' AND j.released < %(max_released)s) THEN j.last_error ELSE %(error)s END,
        locked_by = NULL,
        lease_until = NULL,
        deadline = NULL
    WHERE j.id = %(id)s AND j.attempt = %(attempt)s
      AND j.locked_by = %(worker)s AND j.state = 'running'
    RETURNING j.id, j.state, %(outcome)s::text AS outcome, j.attempt, %(worker)s::text AS worker, j.claimed_at,
              %(error)s::text AS error, %(traceback)s::text AS traceback
), {_attempt_ending}
SELECT state, w.f FROM {_ended}

-- name: release
-- Graceful hand-back (shutdown): queued again at once, and released + 1 so the
-- claim that follows does not spend the budget. A pending cancel wins. run_at
-- is kept (it was due before its claim): the job keeps its place in its
-- queue's and its key's claim order, ahead of jobs enqueued after it.
WITH ended AS (
    UPDATE {schema}.jobs AS j
    SET state = CASE WHEN j.cancel_requested THEN 'cancelled' ELSE 'queued' END,
        finished_at = CASE WHEN j.cancel_requested THEN {now} END,
        released = j.released + 1,
        run_at = least(j.run_at, {now}),
        locked_by = NULL,
        lease_until = NULL,
        deadline = NULL
    WHERE j.id = %(id)s AND j.attempt = %(attempt)s
      AND j.locked_by = %(worker)s AND j.state = 'running'
    RETURNING j.id, j.state, 'released'::text AS outcome, j.attempt, %(worker)s::text AS worker, j.claimed_at,
              NULL::text AS error, NULL::text AS traceback, j.queue
), {_attempt_ending}
SELECT state, queue, w.f FROM {_ended}

-- name: reap
-- Set-based recovery: every lapsed lease (oldest first, bounded per tick) goes
-- down the same retry-or-dead path as fail. FOR UPDATE SKIP LOCKED makes it safe
-- on every worker at once, and against a completion racing on the same row:
-- whichever statement locks the row first wins; the other re-checks its WHERE
-- against the new row version (state is no longer 'running') and matches nothing.
-- The lapsed CTE keeps the old owner and claim time for the audit row, and the
-- UPDATE's RETURNING carries them on (UPDATE ... FROM may return the FROM
-- side's columns) to _ending, so nothing joins the CTEs back together.
-- A recovered job is due again at once, without fail's backoff: I5 promises it
-- is claimable within lease_ttl + reaper_interval, and a crash is no sign that a
-- dependency needs a rest. The lapse still counts against max_attempts. Its
-- run_at is kept (it was due before its claim), so it keeps its place in its
-- queue's and its key's claim order; set to now, it went behind the jobs of
-- its key enqueued after it.
WITH lapsed AS (
    SELECT id, attempt, locked_by, claimed_at, lease_until,
           (deadline IS NOT NULL AND deadline <= {now}) AS timed_out
    FROM {schema}.jobs
    WHERE state = 'running' AND lease_until < {now}
    ORDER BY lease_until
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
), ended AS (
    UPDATE {schema}.jobs AS j
    SET state = CASE
            WHEN j.cancel_requested THEN 'cancelled'
            WHEN j.attempt - j.released >= j.max_attempts THEN 'dead'
            ELSE 'queued' END,
        run_at = least(j.run_at, {now}),
        finished_at = CASE
            WHEN j.cancel_requested OR j.attempt - j.released >= j.max_attempts THEN {now} END,
        last_error = CASE WHEN e.timed_out
            THEN 'attempt timed out after ' || j.timeout || 's (worker ' || e.locked_by || ')'
            ELSE 'worker lease expired (worker ' || e.locked_by || ')' END,
        locked_by = NULL,
        lease_until = NULL,
        deadline = NULL
    FROM lapsed AS e
    WHERE j.id = e.id
    RETURNING j.id, j.state, CASE WHEN e.timed_out THEN 'timed_out' ELSE 'lease_expired' END AS outcome,
              e.attempt, e.locked_by AS worker, e.claimed_at, j.last_error AS error, NULL::text AS traceback,
              e.timed_out, j.queue, e.lease_until
), {_attempt_ending}
SELECT id, attempt, worker, timed_out, state, queue, lease_until, w.f FROM {_ended}

-- name: lapse_leases
-- Start-up reconciliation: the listed workers are provably dead (same host,
-- process gone), so their leases end now instead of at lease_until; the reap
-- that follows recovers the jobs through the normal path. RETURNING lets the
-- caller count the rows through the same path (and error mapping) as the rest.
UPDATE {schema}.jobs
SET lease_until = {now} - interval '1 microsecond'
WHERE state = 'running' AND locked_by = ANY(%(workers)s::text[])
RETURNING id

-- name: cancel
-- One statement, both cases, judged on the old row: a queued job ends
-- cancelled at once; a running one gets a request its worker reads from its
-- next heartbeat. Finished jobs do not match (terminal is final).
-- A queued job cancelled here ran no attempt: no attempts row (_ending
-- alone); a running one is not ended here (its state stays running), and
-- _ending leaves it alone.
-- A waiting job (a workflow step, issue 42) is cancelled as a queued one is,
-- and its ending cancels what waits for it (woken).
WITH ended AS (
    UPDATE {schema}.jobs
    SET state = CASE WHEN state = 'running' THEN state ELSE 'cancelled' END,
        finished_at = CASE WHEN state = 'running' THEN finished_at ELSE {now} END,
        cancel_requested = (state = 'running')
    WHERE id = %(id)s AND state IN ('waiting', 'queued', 'running')
    RETURNING id, state
), {_ending}
SELECT state, w.f FROM {_ended}

-- name: retry
-- An operator's second chance for a dead or cancelled job: queued now, with at
-- least one attempt left in its budget. The queue comes back so that the
-- caller can announce the job on a transport (NATS) once this has committed.
-- The workflow steps its ending cancelled wait for it again (jobs_reopened,
-- migration 0012), called only for a job that has dependents.
WITH r AS (
    UPDATE {schema}.jobs
    SET state = 'queued',
        run_at = {now},
        finished_at = NULL,
        cancel_requested = false,
        max_attempts = GREATEST(max_attempts, attempt - released + 1)
    WHERE id = %(id)s AND state IN ('dead', 'cancelled')
    RETURNING id, queue
)
SELECT r.queue, CASE WHEN EXISTS (SELECT 1 FROM {schema}.job_deps AS d WHERE d.upstream_id = r.id)
                THEN {schema}.jobs_reopened(r.id)::text END
FROM r

-- name: job_state
SELECT state FROM {schema}.jobs WHERE id = %(id)s

-- name: get_job
-- job_select: every column a Job is made of, in the declared order
-- (store/columns.py: READ), which rows.job_from_row reads by name.
SELECT {job_select}
FROM {schema}.jobs WHERE id = %(id)s

-- name: _live_owner
-- A job's locked_by as the API gives it: its owner while it has one. A
-- succeeded row keeps the worker of its last attempt (_fenced_success: the
-- success's audit); that worker is no owner, and get_attempts names it.
CASE WHEN state = 'succeeded' THEN NULL ELSE locked_by END AS locked_by

-- name: _successes
-- The attempts rows a success leaves on its job row (_fenced_success), shaped
-- as the attempts table's, for the readers of attempts to add to that table's
-- rows (a FROM item: alias it). locked_by IS NOT NULL leaves out the
-- successes that wrote an attempts row instead (before this was so, or by a
-- worker of an older release): those are in the table, and one attempt is
-- never counted twice.
SELECT id AS job_id, attempt, locked_by AS worker, claimed_at, finished_at, 'succeeded'::text AS outcome,
       NULL::text AS error, NULL::text AS traceback
FROM {schema}.jobs WHERE state = 'succeeded' AND locked_by IS NOT NULL

-- name: get_attempts
SELECT job_id, attempt, worker, claimed_at, finished_at, outcome, error, traceback
FROM {schema}.attempts WHERE job_id = %(id)s
UNION ALL
SELECT * FROM ({_successes} AND id = %(id)s) AS s
ORDER BY attempt

-- name: get_attempts_newest
-- get_job's history (issue 41): the newest (limit) attempts, newest first,
-- each with the job's count of attempts (count(*) OVER () is taken before the
-- LIMIT): a job snoozed or failed thousands of times would otherwise be read
-- whole, every error and traceback of it, on every look at the job.
SELECT job_id, attempt, worker, claimed_at, finished_at, outcome, error, traceback, count(*) OVER () AS total
FROM (
    SELECT job_id, attempt, worker, claimed_at, finished_at, outcome, error, traceback
    FROM {schema}.attempts WHERE job_id = %(id)s
    UNION ALL
    SELECT * FROM ({_successes} AND id = %(id)s) AS s
) AS a
ORDER BY attempt DESC
LIMIT %(limit)s

-- name: recent_attempts
-- Finished attempts with one of these outcomes, newest first (the dashboard's
-- recoveries: lease_expired rows are written by the reaper). A scan of the
-- attempts table bounded by LIMIT; it is an operator's page, not a hot path.
-- Successes are read off their job rows (_successes), and only when asked for
-- (a one-time filter). Their own ORDER BY and LIMIT let jobs_finished_idx
-- (state, finished_at) hand over the newest successes without a sort of them all.
SELECT * FROM (
    SELECT job_id, attempt, worker, claimed_at, finished_at, outcome, error, traceback
    FROM {schema}.attempts
    WHERE outcome = ANY(%(outcomes)s::text[])
    UNION ALL
    (SELECT * FROM ({_successes} AND 'succeeded' = ANY(%(outcomes)s::text[])
                    ORDER BY finished_at DESC, id DESC LIMIT %(limit)s) AS s)
) AS a
ORDER BY finished_at DESC, job_id DESC
LIMIT %(limit)s

-- name: throughput
-- Finished attempts per time bucket and outcome in [start, end), epoch
-- seconds the caller aligned to the bucket size (store/buckets.py); the
-- bucket index is the offset from start divided by the size, floored
-- (extract(epoch ...) is numeric: exact at a bucket's edge).
-- Cost: attempts_finished_idx (migration 0002) is a BRIN index on
-- finished_at: attempts are appended as they end, so the heap is in
-- finished_at order and the index keeps one min/max summary per 128 pages.
-- The window is the table's tail: a bitmap scan reads the few page ranges
-- whose summary overlaps it (and the not yet summarised last ones), not the
-- whole history. Should old attempts ever be deleted and their space refilled
-- by new ones, the summaries loosen: the answer stays exact, more pages are read.
-- Successes are counted off the job rows, every one of them: a succeeded job
-- had exactly one succeeded attempt, which finished when the job did, whether
-- its record is the row itself (_fenced_success) or also an attempts row (a
-- success written by an older release, left out of the attempts branch here).
-- So the jobs branch needs only jobs_finished_idx (state, finished_at), a
-- range scan that can answer from the index alone (no heap fetch for
-- locked_by, which _successes would need).
SELECT floor((extract(epoch FROM finished_at) - %(start)s) / %(bucket)s)::integer AS bucket, outcome, count(*)
FROM (
    SELECT finished_at, outcome FROM {schema}.attempts
    WHERE finished_at >= to_timestamp(%(start)s) AND finished_at < to_timestamp(%(end)s)
      AND outcome <> 'succeeded'
    UNION ALL
    SELECT finished_at, 'succeeded' FROM {schema}.jobs
    WHERE state = 'succeeded' AND finished_at >= to_timestamp(%(start)s) AND finished_at < to_timestamp(%(end)s)
) AS a
GROUP BY 1, 2

-- name: list_jobs
SELECT {job_select}
FROM {schema}.jobs
WHERE (%(state)s::text IS NULL OR state = %(state)s)
  AND (%(queue)s::text IS NULL OR queue = %(queue)s)
  AND (%(task)s::text IS NULL OR task = %(task)s)
ORDER BY id DESC
LIMIT %(limit)s

-- name: counts
SELECT queue, state, count(*) FROM {schema}.jobs GROUP BY queue, state

-- name: oldest_queued
-- Walks jobs_claim_idx: only queued rows are in it.
SELECT queue, min(run_at) FROM {schema}.jobs
WHERE state = 'queued' AND run_at <= now()
GROUP BY queue

-- name: register_worker
-- owner (a tether server's fingerprint of the registering token) is set only
-- by the insert. A re-registration refreshes the row when it comes from the
-- same owner, or from a trusted caller (owner NULL: this database's own
-- workers, a server's admin token); from another token it changes nothing
-- (the conflicting row stays as it was), and the server, reading the owner
-- back (worker_owners), refuses it. tasks (the worker's task names, migration
-- 0006) is refreshed with the row.
INSERT INTO {schema}.workers AS w
    (id, host, pid, proc_start, started_at, last_seen, queues, concurrency, owner, tasks)
VALUES (%(id)s, %(host)s, %(pid)s, %(proc_start)s, now(), now(), %(queues)s::jsonb, %(concurrency)s,
        %(owner)s::text, %(tasks)s::jsonb)
ON CONFLICT (id) DO UPDATE SET last_seen = now(), stopped_at = NULL, tasks = excluded.tasks
WHERE %(owner)s::text IS NULL OR w.owner = %(owner)s::text

-- name: worker_owners
-- The owner of each of these workers that is registered (a tether server
-- checks that a worker token acts only for the workers it registered).
SELECT id, owner FROM {schema}.workers WHERE id = ANY(%(ids)s::text[])

-- name: stop_worker
UPDATE {schema}.workers SET stopped_at = {now} WHERE id = %(id)s AND stopped_at IS NULL

-- name: list_workers
SELECT id, host, pid, proc_start, started_at, last_seen, queues, concurrency, stopped_at, tasks
FROM {schema}.workers
WHERE (%(host)s::text IS NULL OR host = %(host)s)
  AND (NOT %(live_only)s OR stopped_at IS NULL)
ORDER BY started_at

-- name: list_workers_page
-- The dashboard's workers page, and a server's list (issue 41): one page of
-- them, live ones first, the most recently seen first. A server took 10,000
-- registrations of one token, and listing them all made a 90 MB answer.
SELECT id, host, pid, proc_start, started_at, last_seen, queues, concurrency, stopped_at, tasks
FROM {schema}.workers
WHERE (%(host)s::text IS NULL OR host = %(host)s)
  AND (NOT %(live_only)s OR stopped_at IS NULL)
ORDER BY stopped_at IS NOT NULL, last_seen DESC, id
LIMIT %(limit)s OFFSET %(offset)s

-- name: count_workers
-- How many workers' rows there are: of one owner (a server's per-token cap),
-- serving a queue, only live ones (not stopped, seen in the last "since"
-- seconds: a server's live-workers-per-queue cap), or all. The table is
-- bounded by those caps and by prune_workers: a scan of it is cheap.
SELECT count(*) FROM {schema}.workers
WHERE (%(owner)s::text IS NULL OR owner = %(owner)s::text)
  AND (NOT %(live_only)s OR (stopped_at IS NULL AND last_seen >= {now} - make_interval(secs => %(since)s::float8)))
  AND (%(queue)s::text IS NULL OR queues ? %(queue)s::text)

-- name: prune_workers
-- Workers' rows past retention (issue 41): stopped "age" seconds ago, or
-- never stopped (killed) and silent that long; the oldest first, at most
-- "limit" per statement (the pruner repeats it), of one owner when one is
-- given (a server making room under a token's cap). Nothing refers to a
-- worker's row: its attempts keep the id as text.
DELETE FROM {schema}.workers WHERE id IN (
    SELECT id FROM {schema}.workers
    WHERE coalesce(stopped_at, last_seen) < {now} - make_interval(secs => %(age)s::float8)
      AND (%(owner)s::text IS NULL OR owner = %(owner)s::text)
    ORDER BY coalesce(stopped_at, last_seen)
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED)
RETURNING id

-- name: _known
-- The (queue, task) pairs that workers seen since %(since)s seconds ago know
-- (a CTE body): every queue of each worker with every task it registered. A
-- worker from before workers.tasks (NULL) claims any task: it knows them all,
-- which the pair (queue, NULL) says. The workers table is small (a row per
-- worker process started) and read once per statement, not once per job.
-- It ends with its WHERE, so that a query may add a condition (live only).
SELECT q.name AS queue, t.name AS task
FROM {schema}.workers AS w
CROSS JOIN LATERAL jsonb_array_elements_text(w.queues) AS q(name)
CROSS JOIN LATERAL jsonb_array_elements_text(coalesce(w.tasks, '[null]'::jsonb)) AS t(name)
WHERE w.last_seen >= {now} - make_interval(secs => %(since)s)

-- name: _queued_pairs
-- Every (queue, task) pair that has a queued job (a CTE body, WITH RECURSIVE):
-- a loose index scan of jobs_claim_task_idx, one descent per pair to the next
-- pair after it, so it reads as many index entries as there are pairs, not
-- as there are jobs. (Both statements below run on every worker once a
-- minute, and unknown_tasks on every dashboard refresh: a GROUP BY over the
-- queued rows would read the whole backlog each time.) The row comparison
-- (queue, task) > (...) is an index condition on the key's first two columns.
    (SELECT queue, task FROM {schema}.jobs WHERE coalesce(state, '') = 'queued' ORDER BY queue, task LIMIT 1)
    UNION ALL
    SELECT n.queue, n.task
    FROM pairs AS p
    CROSS JOIN LATERAL (
        SELECT queue, task FROM {schema}.jobs
        WHERE coalesce(state, '') = 'queued' AND (queue, task) > (p.queue, p.task)
        ORDER BY queue, task
        LIMIT 1
    ) AS n

-- name: unknown_tasks
-- For `tether status`, the dashboard, the metric and each worker's warning:
-- due queued jobs, by (queue, task), whose task no live worker knows (no
-- worker seen in the last %(since)s seconds and not stopped serves the queue
-- with a handler of that name). They wait, budget untouched, until one does.
-- The pairs come from the loose index scan, the unknown ones are kept
-- (MATERIALIZED: filtered before anything is counted), and only their jobs
-- are counted: the cost is the pairs plus the jobs no worker knows.
WITH RECURSIVE pairs AS (
{_queued_pairs}
), known AS (
{_known}
      AND w.stopped_at IS NULL
), unknown AS MATERIALIZED (
    SELECT p.queue, p.task FROM pairs AS p
    WHERE NOT EXISTS (SELECT 1 FROM known AS k WHERE k.queue = p.queue AND (k.task IS NULL OR k.task = p.task))
)
SELECT u.queue, u.task, c.jobs, c.oldest
FROM unknown AS u
CROSS JOIN LATERAL (
    SELECT count(*) AS jobs, min(run_at) AS oldest FROM {schema}.jobs
    WHERE coalesce(state, '') = 'queued' AND queue = u.queue AND task = u.task AND run_at <= {now}
) AS c
WHERE c.jobs > 0
ORDER BY u.queue, u.task

-- name: bury_unknown
-- The unknown-task service's rule (worker/unknown.py): a job of a task that
-- no worker serving its queue has known for the grace period (none seen in
-- the last %(since)s seconds, running or stopped), due for at least that
-- long, ends dead with the reason recorded: a name no worker will ever know
-- (a typo, a task deleted with jobs still queued) ends somewhere visible
-- instead of waiting for ever. A worker seen within the grace that knows the
-- task keeps its jobs alive, so a deploy shorter than the grace never kills
-- a good job. No attempt was made, so no attempt row (_ending alone); attempt
-- stays as it was. A waiter is woken (_ending), as for every other ending.
-- Only the caller's queues, bounded; the pairs come from the loose
-- index scan (as in unknown_tasks), so only the jobs of unknown pairs are
-- read. SKIP LOCKED lets every worker run it at once (a row moves out of
-- queued once).
WITH RECURSIVE pairs AS (
{_queued_pairs}
), known AS (
{_known}
), doomed_pairs AS MATERIALIZED (
    SELECT p.queue, p.task FROM pairs AS p
    WHERE p.queue = ANY(%(queues)s::text[])
      AND NOT EXISTS (SELECT 1 FROM known AS k WHERE k.queue = p.queue AND (k.task IS NULL OR k.task = p.task))
), doomed AS (
    SELECT j.id FROM doomed_pairs AS d
    JOIN {schema}.jobs AS j ON coalesce(j.state, '') = 'queued' AND j.queue = d.queue AND j.task = d.task
    WHERE j.run_at <= {now} - make_interval(secs => %(since)s)
    LIMIT %(limit)s
    FOR UPDATE OF j SKIP LOCKED
), ended AS (
    UPDATE {schema}.jobs AS j
    SET state = 'dead',
        finished_at = {now},
        last_error = format('unknown task %%L: no worker serving queue %%L has known it for %%ss '
                            '(unknown_task_grace); `tether retry` once a worker has it', j.task, j.queue, %(since)s)
    FROM doomed AS d
    WHERE j.id = d.id AND j.state = 'queued'
    RETURNING j.id, j.state, j.queue, j.task, j.last_error
), {_ending}
SELECT id, queue, task, last_error, w.f FROM {_ended}

-- name: expire
-- The expiry service's rule (worker/expiry.py; issue 44): a queued job whose
-- expires_at has passed is never started (the claims' _due), and this ends it:
-- cancelled, with an attempts row of outcome 'expired' (worker: the one that
-- swept it; claimed_at = finished_at = now: it never ran) and the reason in
-- last_error. The row's attempt and released both go up by one, so the audit
-- row has an attempt number of its own (a retried job's next claim takes the
-- one after) and the budget is untouched (attempt - released). A waiter is
-- woken (_attempt_ending), as for every ending. Oldest expiry first over
-- jobs_expiry_idx (queued jobs with an expiry only), bounded; SKIP LOCKED lets
-- every worker run it at once, and a claim locking a row first wins it: the
-- claim's own _due has then judged it (expired jobs are never started).
WITH doomed AS (
    SELECT id FROM {schema}.jobs
    WHERE state = 'queued' AND expires_at IS NOT NULL AND expires_at < {now}
    ORDER BY expires_at
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
), ended AS (
    UPDATE {schema}.jobs AS j
    SET state = 'cancelled',
        finished_at = {now},
        attempt = j.attempt + 1,
        released = j.released + 1,
        last_error = 'expired: not started by its expires_at'
    FROM doomed AS d
    WHERE j.id = d.id AND j.state = 'queued'
    RETURNING j.id, j.state, 'expired'::text AS outcome, j.attempt, %(worker)s::text AS worker,
              {now} AS claimed_at, j.last_error AS error, NULL::text AS traceback, j.queue, j.task
), {_attempt_ending}
SELECT id, queue, task, error, w.f FROM {_ended}

-- name: notify
-- Wake idle workers when jobs become due again without an insert (the enqueue
-- trigger's job): recovered by the reaper, or released at shutdown.
SELECT pg_notify({channel}, q) FROM unnest(%(queues)s::text[]) AS q

-- name: db_now
SELECT now()

-- name: set_result
-- The return value of a handler whose success ctx.transaction() already wrote
-- (fenced, in the handler's own transaction): the handler returns after its
-- block, so its result arrives after the commit. Succeeded is terminal and only
-- the attempt that held the job could have made it so, with its worker kept
-- on the row (_fenced_success): id AND attempt AND state = 'succeeded' AND
-- locked_by name that attempt's success and nothing else. (A success written
-- by an older release has locked_by NULL and its worker in an attempts row.)
-- Rewriting the same value is harmless, so a retried write needs no check of
-- its own.
UPDATE {schema}.jobs AS j
SET result = %(result)s::jsonb
WHERE j.id = %(id)s AND j.attempt = %(attempt)s AND j.state = 'succeeded'
  AND (j.locked_by = %(worker)s
       OR EXISTS (SELECT 1 FROM {schema}.attempts AS a
                  WHERE a.job_id = j.id AND a.attempt = j.attempt AND a.worker = %(worker)s
                    AND a.outcome = 'succeeded'))
RETURNING j.id

-- ---------------------------------------------------------------------------
-- Schedules (I6: each tick of a schedule becomes at most one job).
-- The decider is the primary key of schedule_ticks (schedule, tick): every
-- worker that finds a tick due inserts it ON CONFLICT DO NOTHING, and only the
-- statement whose insert landed makes the job, in that same statement. No
-- leader, no lock held between workers, nothing a paused worker could hold.

-- name: sync_schedules
-- A worker's app declares its schedules: upsert each (sorted by name, so two
-- workers starting together lock the rows in the same order), and mark every
-- other schedule orphaned (kept, not deleted: its ticks and jobs stay).
-- version rises on any change to the definition, which voids fires computed
-- from the old one (fire_ticks matches on it). since moves only when the cron
-- or the timezone changed: the ticks owed are those after it, so a new
-- expression takes effect at its next tick and never fires its past ones; a
-- change of args or options keeps since, so no tick is lost to it.
-- The orphaning UPDATE runs beside the upsert (a data-modifying CTE runs
-- whether or not it is referenced) and touches only rows it did not upsert.
-- A dynamic schedule (app.add_schedule) is no app's: a sync neither
-- overwrites it (add_schedule refuses the name of a declared one) nor
-- orphans it.
WITH declared AS (
    INSERT INTO {schema}.schedules AS s
        (name, cron, timezone, args, queue, priority, max_attempts, lease_ttl, timeout, backoff_base,
         catch_up, overlap, since, created_at, updated_at, last_seen)
    SELECT d.name, d.cron, d.timezone, d.args::jsonb, d.queue, d.priority, d.max_attempts, d.lease_ttl,
           d.timeout, d.backoff_base, d.catch_up, d.overlap, {now}, {now}, {now}, {now}
    FROM unnest(%(name)s::text[], %(cron)s::text[], %(timezone)s::text[], %(args)s::text[], %(queue)s::text[],
                %(priority)s::int[], %(max_attempts)s::int[], %(lease_ttl)s::float8[], %(timeout)s::float8[],
                %(backoff_base)s::float8[], %(catch_up)s::int[], %(overlap)s::boolean[])
         WITH ORDINALITY AS d(name, cron, timezone, args, queue, priority, max_attempts, lease_ttl, timeout,
                              backoff_base, catch_up, overlap, ord)
    ORDER BY d.ord
    ON CONFLICT (name) DO UPDATE SET
        cron = excluded.cron, timezone = excluded.timezone, args = excluded.args, queue = excluded.queue,
        priority = excluded.priority, max_attempts = excluded.max_attempts, lease_ttl = excluded.lease_ttl,
        timeout = excluded.timeout, backoff_base = excluded.backoff_base, catch_up = excluded.catch_up,
        overlap = excluded.overlap,
        version = s.version + CASE
            WHEN (s.cron, s.timezone, s.args, s.queue, s.priority, s.max_attempts, s.lease_ttl, s.timeout,
                  s.backoff_base, s.catch_up, s.overlap)
                 IS DISTINCT FROM
                 (excluded.cron, excluded.timezone, excluded.args, excluded.queue, excluded.priority,
                  excluded.max_attempts, excluded.lease_ttl, excluded.timeout, excluded.backoff_base,
                  excluded.catch_up, excluded.overlap)
            THEN 1 ELSE 0 END,
        since = CASE WHEN (s.cron, s.timezone) IS DISTINCT FROM (excluded.cron, excluded.timezone)
                     THEN excluded.since ELSE s.since END,
        updated_at = CASE
            WHEN (s.cron, s.timezone, s.args, s.queue, s.priority, s.max_attempts, s.lease_ttl, s.timeout,
                  s.backoff_base, s.catch_up, s.overlap)
                 IS DISTINCT FROM
                 (excluded.cron, excluded.timezone, excluded.args, excluded.queue, excluded.priority,
                  excluded.max_attempts, excluded.lease_ttl, excluded.timeout, excluded.backoff_base,
                  excluded.catch_up, excluded.overlap)
            THEN excluded.updated_at ELSE s.updated_at END,
        last_seen = excluded.last_seen,
        orphaned = false
    WHERE NOT s.dynamic
    RETURNING name
)
UPDATE {schema}.schedules
SET orphaned = true
WHERE NOT orphaned AND NOT dynamic AND name <> ALL(%(name)s::text[])

-- name: schedules_to_fire
-- What a fire needs to compute the due ticks in Python (cron is not SQL),
-- read with the database clock: the ticks are judged on {now}, never on a
-- worker's clock. Primary-key lookups, once a scheduler tick per worker;
-- plus the dynamic schedules (app.add_schedule) of the tasks this worker
-- knows, so one added at run time is fired without a restart. A paused
-- schedule is not fired.
SELECT {now}, name, cron, timezone, catch_up, overlap, version, since, last_tick
FROM {schema}.schedules
WHERE NOT paused
  AND ((NOT dynamic AND name = ANY(%(names)s::text[])) OR (dynamic AND task = ANY(%(tasks)s::text[])))

-- name: fire_ticks
-- One schedule's due ticks (oldest first) in one statement:
-- s:      the definition, only while it is still the version the ticks were
--         computed from (a deploy that changed it since voids this fire; the
--         next round computes again from the new one), not paused (a pause
--         bumps the version too), and only while the
--         read they were computed from (read_at, schedules_to_fire's clock)
--         is less than max_age seconds old: a worker that stalled between the
--         two statements may hold ticks decided since by another worker whose
--         rows were pruned (prune_ticks keeps them longer than max_age);
-- won:    the decider: each tick inserted ON CONFLICT DO NOTHING; a tick
--         another worker decided first returns nothing here. A tick is skipped
--         (overlap=False) when the caller says so (a later tick of this same
--         fire, behind the job its first tick makes) or when the schedule's
--         last job is still queued or running: a primary-key probe, not a scan
--         of the schedule's history;
-- made:   a job for each tick won and not skipped, due at its tick, with
--         its task's tags from %(tags)s (store/schedules.py TaskTags: the
--         firing worker's code names them; NULL -> anything is NULL: none);
-- marked: the schedule's bookkeeping, only ever forward (GREATEST and the
--         comparisons below), since fires for different ticks may commit in
--         any order.
WITH s AS (
    SELECT * FROM {schema}.schedules
    WHERE name = %(name)s AND version = %(version)s AND NOT paused
      AND {now} < %(read_at)s::timestamptz + make_interval(secs => %(max_age)s)
), won AS (
    INSERT INTO {schema}.schedule_ticks (schedule, tick, skipped, decided_at)
    SELECT s.name, d.tick,
           d.skip OR (NOT s.overlap AND EXISTS (
               SELECT 1 FROM {schema}.jobs AS j WHERE j.id = s.last_job_id AND j.state IN ('queued', 'running'))),
           {now}
    FROM s CROSS JOIN unnest(%(ticks)s::timestamptz[], %(skip)s::boolean[]) AS d(tick, skip)
    ORDER BY d.tick
    ON CONFLICT (schedule, tick) DO NOTHING
    RETURNING schedule, tick, skipped
), made AS (
    INSERT INTO {schema}.jobs
        (queue, task, args, priority, run_at, max_attempts, lease_ttl, timeout, backoff_base, created_at,
         schedule, scheduled_for, tags)
    SELECT s.queue, coalesce(s.task, s.name), s.args, s.priority, won.tick, s.max_attempts, s.lease_ttl,
           s.timeout, s.backoff_base, {now}, won.schedule, won.tick, %(tags)s::jsonb -> coalesce(s.task, s.name)
    FROM won CROSS JOIN s
    WHERE NOT won.skipped
    ORDER BY won.tick
    RETURNING id, scheduled_for
), latest AS (
    SELECT max(won.tick) AS tick,
           count(*) FILTER (WHERE won.skipped) AS skipped,
           (SELECT m.scheduled_for FROM made AS m ORDER BY m.scheduled_for DESC LIMIT 1) AS fired,
           (SELECT m.id FROM made AS m ORDER BY m.scheduled_for DESC LIMIT 1) AS job_id
    FROM won
), marked AS (
    UPDATE {schema}.schedules AS t
    SET last_tick = GREATEST(t.last_tick, l.tick),
        last_fired = CASE WHEN l.fired > coalesce(t.last_fired, '-infinity') THEN l.fired ELSE t.last_fired END,
        last_job_id = CASE WHEN l.fired > coalesce(t.last_fired, '-infinity') THEN l.job_id ELSE t.last_job_id END,
        skipped = t.skipped + l.skipped
    FROM latest AS l
    WHERE t.name = %(name)s AND l.tick IS NOT NULL
)
SELECT won.tick, made.id, s.queue, coalesce(s.task, s.name)
FROM won CROSS JOIN s LEFT JOIN made ON made.scheduled_for = won.tick
ORDER BY won.tick

-- name: list_schedules
SELECT {now}, name, cron, timezone, args, queue, catch_up, overlap, since, last_tick, last_fired,
       last_job_id, skipped, orphaned, last_seen, coalesce(task, name), dynamic, paused, triggered, last_triggered
FROM {schema}.schedules
ORDER BY name

-- name: add_schedule
-- A dynamic schedule (app.add_schedule): one insert, which a name already
-- taken (a dynamic or a synced code schedule) turns away: no row returned.
-- since is now, so its first tick is the next one after it is added.
INSERT INTO {schema}.schedules AS s
    (name, task, dynamic, cron, timezone, args, queue, priority, max_attempts, lease_ttl, timeout, backoff_base,
     catch_up, overlap, since, created_at, updated_at, last_seen)
VALUES (%(name)s, %(task)s, true, %(cron)s, %(timezone)s, %(args)s::jsonb, %(queue)s, %(priority)s,
        %(max_attempts)s, %(lease_ttl)s, %(timeout)s, %(backoff_base)s, %(catch_up)s, %(overlap)s,
        {now}, {now}, {now}, {now})
ON CONFLICT (name) DO NOTHING
RETURNING name

-- name: set_schedule_paused
-- Pause or resume one schedule (code or dynamic). A change bumps version,
-- which voids a fire computed before it (fire_ticks matches on it). Resuming
-- moves since to now: the ticks that fell while it was paused are not owed,
-- so it resumes at its next tick with no catch-up storm. The same state
-- again changes nothing. No row: no such schedule.
UPDATE {schema}.schedules
SET paused = %(paused)s,
    version = version + CASE WHEN paused <> %(paused)s THEN 1 ELSE 0 END,
    since = CASE WHEN paused AND NOT %(paused)s THEN {now} ELSE since END,
    updated_at = CASE WHEN paused <> %(paused)s THEN {now} ELSE updated_at END
WHERE name = %(name)s
RETURNING dynamic

-- name: remove_schedule
-- Delete a dynamic schedule; a code schedule stays (its app would sync it
-- back). The EXISTS reads the snapshot before the delete, so the answer
-- tells "removed", "a code schedule" and "no such schedule" apart. Its ticks
-- rows are left to prune_ticks, its jobs keep their schedule column.
WITH gone AS (
    DELETE FROM {schema}.schedules WHERE name = %(name)s AND dynamic RETURNING name
)
SELECT (SELECT count(*) FROM gone), EXISTS (SELECT 1 FROM {schema}.schedules WHERE name = %(name)s)

-- name: trigger_schedule
-- One job now, recorded as a manual tick: a ticks row at the database's now
-- with manual = true (the primary key still admits one), and its job, due
-- at once, in one statement. It does not move last_tick, so no cron tick is
-- lost to it; last_fired and last_job_id move forward as a fire's do
-- (overlap=False then waits for this job too). Paused or not. Its job has
-- its task's tags, as fire_ticks' jobs do.
WITH s AS (
    SELECT * FROM {schema}.schedules WHERE name = %(name)s
), won AS (
    INSERT INTO {schema}.schedule_ticks (schedule, tick, skipped, decided_at, manual)
    SELECT s.name, {now}, false, {now}, true FROM s
    ON CONFLICT (schedule, tick) DO NOTHING
    RETURNING schedule, tick
), made AS (
    INSERT INTO {schema}.jobs
        (queue, task, args, priority, run_at, max_attempts, lease_ttl, timeout, backoff_base, created_at,
         schedule, scheduled_for, tags)
    SELECT s.queue, coalesce(s.task, s.name), s.args, s.priority, won.tick, s.max_attempts, s.lease_ttl,
           s.timeout, s.backoff_base, {now}, won.schedule, won.tick, %(tags)s::jsonb -> coalesce(s.task, s.name)
    FROM won CROSS JOIN s
    RETURNING id, queue, scheduled_for, task
), marked AS (
    UPDATE {schema}.schedules AS t
    SET triggered = t.triggered + 1, last_triggered = m.scheduled_for,
        last_fired = GREATEST(t.last_fired, m.scheduled_for),
        last_job_id = CASE WHEN m.scheduled_for > coalesce(t.last_fired, '-infinity') THEN m.id
                           ELSE t.last_job_id END
    FROM made AS m
    WHERE t.name = %(name)s
)
SELECT made.id, made.queue, made.scheduled_for, made.task, (SELECT count(*) FROM s) FROM made
UNION ALL
SELECT NULL, NULL, NULL, NULL, (SELECT count(*) FROM s) WHERE NOT EXISTS (SELECT 1 FROM made)

-- name: prune_ticks
-- The pruner: up to `limit` ticks decided more than `keep` seconds ago, which
-- no fire can propose again (store/schedules.py says why). Each schedule's
-- are read on their own (LATERAL over the schedules, a few rows), by a range
-- of the primary key (schedule, tick): a tick is never later than the fire
-- that decided it, so `tick < cutoff` holds for every row wanted, and the
-- range reads old rows only, plus the few caught-up ticks decided recently,
-- which decided_at keeps. No index on decided_at: one more entry per tick
-- for nothing the key does not already give.
-- SKIP LOCKED and the ctids, as prune does: pruners on several workers pass
-- by each other's rows. Fires never wait for it: they insert newer ticks.
WITH doomed AS (
    SELECT t.ctid
    FROM {schema}.schedules AS s
    CROSS JOIN LATERAL (
        SELECT ctid FROM {schema}.schedule_ticks
        WHERE schedule = s.name AND tick < {now} - make_interval(secs => %(keep)s)
          AND decided_at < {now} - make_interval(secs => %(keep)s)
        LIMIT %(limit)s
        FOR UPDATE SKIP LOCKED
    ) AS t
    LIMIT %(limit)s
), gone AS (
    DELETE FROM {schema}.schedule_ticks
    WHERE ctid = ANY(ARRAY(SELECT ctid FROM doomed))
    RETURNING 1
)
SELECT count(*) FROM gone

-- ---------------------------------------------------------------------------
-- Job control (issue 20): retention.

-- name: prune
-- Retention: delete the oldest finished jobs, with their attempts rows, up to
-- `limit` per statement. The (state, age) pairs arrive as two arrays, and each
-- state is read on its own (LATERAL, as claim does per queue), because only an
-- equality on state lets jobs_finished_idx (state, finished_at) hand rows over
-- already in finish order, so each scan stops after `limit` rows however much
-- history there is. `finished_at < cutoff` implies the index's predicate
-- (finished_at IS NOT NULL), and only finished rows have a finished_at, so a
-- queued or running row is never read, locked or deleted; the DELETE checks
-- the state once more so that no future statement that sets finished_at on a
-- live row could make the pruner delete it.
-- SKIP LOCKED: pruners on every worker pass over each other's rows instead of
-- queueing behind them. Claims never wait for the pruner: they lock queued
-- rows only, and a finished row never becomes queued except by an operator's
-- retry, which waits for this short statement, then finds no job.
-- The caller passes only finished states (Store.prune checks them).
-- The rows are deleted by the ctids picked locked (a TID scan, as claim does):
-- a locked row cannot move, and no join is left for the planner to turn into
-- a scan of the table (with a join on id it hashed the whole jobs table).
-- The attempts go by `job_id = ANY(...)`: the primary key (job_id, attempt).
-- A step of a workflow that has not ended (a step of it still waiting, queued
-- or running) stays (issue 42: its result is a later step's ctx.upstream, and
-- its edges are what a retry reopens: _unfinished_run); a pruned step takes
-- its step row, edges and counts with it.
WITH doomed AS (
    SELECT c.ctid, c.finished_at
    FROM unnest(%(states)s::text[], %(ages)s::float8[]) AS r(state, age)
    CROSS JOIN LATERAL (
        SELECT ctid, finished_at FROM {schema}.jobs
        WHERE state = r.state AND finished_at < {now} - make_interval(secs => r.age)
          AND NOT {_unfinished_run}
        ORDER BY finished_at
        LIMIT %(limit)s
        FOR UPDATE SKIP LOCKED
    ) AS c
    ORDER BY c.finished_at
    LIMIT %(limit)s
), gone AS (
    DELETE FROM {schema}.jobs AS j
    WHERE j.ctid = ANY(ARRAY(SELECT ctid FROM doomed))
      AND j.state IN ('succeeded', 'dead', 'cancelled')
    RETURNING j.id, j.state
), audit AS (
    DELETE FROM {schema}.attempts AS a
    WHERE a.job_id = ANY(ARRAY(SELECT id FROM gone))
), steps AS (
    DELETE FROM {schema}.workflow_steps AS s WHERE s.job_id = ANY(ARRAY(SELECT id FROM gone))
), edges AS (
    DELETE FROM {schema}.job_deps AS d
    WHERE d.job_id = ANY(ARRAY(SELECT id FROM gone)) OR d.upstream_id = ANY(ARRAY(SELECT id FROM gone))
), counts AS (
    DELETE FROM {schema}.job_waits AS w WHERE w.job_id = ANY(ARRAY(SELECT id FROM gone))
)
SELECT state, count(*) FROM gone GROUP BY state

-- name: _unfinished_run
-- Whether the job (jobs, unaliased) is a step of a workflow run that has a
-- step not yet ended: one probe of workflow_steps' primary key for a job of
-- no workflow, and none at all while there are no workflows (a one-time
-- test). The run is found by a scalar subquery, and the AND sits between
-- the tests: written as one EXISTS over a join, NOT EXISTS became an anti
-- join, or a hashed subplan, each reading every unfinished job of the table
-- (test_retention.py).
-- A member of a batch not yet finished stays too (batches_open_idx: a
-- one-time probe while no batch is open).
((EXISTS (SELECT 1 FROM {schema}.workflow_steps)
  AND EXISTS (SELECT 1 FROM {schema}.workflow_steps AS o
              JOIN {schema}.jobs AS oj ON oj.id = o.job_id
              WHERE o.workflow_id = (SELECT s.workflow_id FROM {schema}.workflow_steps AS s WHERE s.job_id = jobs.id)
                AND oj.state IN ('waiting', 'queued', 'running')))
 OR (EXISTS (SELECT 1 FROM {schema}.batches WHERE finished_at IS NULL)
     AND EXISTS (SELECT 1 FROM {schema}.job_deps AS bd
                 JOIN {schema}.batches AS b ON b.id = (-bd.job_id) / 16
                 WHERE bd.upstream_id = jobs.id AND bd.job_id < 0 AND b.finished_at IS NULL)))

-- name: prunable
-- What prune would delete, by state (tether prune --dry-run, and the total of
-- its progress bar): the same WHERE, counted over jobs_finished_idx.
SELECT r.state,
       (SELECT count(*) FROM {schema}.jobs
        WHERE state = r.state AND finished_at < {now} - make_interval(secs => r.age)
          AND NOT {_unfinished_run})
FROM unnest(%(states)s::text[], %(ages)s::float8[]) AS r(state, age)

-- ---------------------------------------------------------------------------
-- Job control (issue 20): pause and resume.

-- name: set_paused
-- Pause or resume a queue: one row per queue, upserted. A resume wakes idle
-- workers on the queue's channel at once (the enqueue trigger's NOTIFY), so
-- its backlog does not wait for their next poll.
WITH s AS (
    INSERT INTO {schema}.queues AS q (queue, paused, updated_at)
    VALUES (%(queue)s, %(paused)s, {now})
    ON CONFLICT (queue) DO UPDATE SET paused = EXCLUDED.paused, updated_at = EXCLUDED.updated_at
    RETURNING q.queue, q.paused
)
SELECT queue, CASE WHEN NOT paused THEN pg_notify({channel}, queue)::text END FROM s

-- name: paused_queues
SELECT queue FROM {schema}.queues WHERE paused ORDER BY queue

-- ---------------------------------------------------------------------------
-- Job control (issue 20): queue limits.

-- name: set_limits
-- A queue's limits, set whole (NULL: no such limit): one row per queue,
-- upserted beside its paused flag. The claim statements read them from the
-- next claim on (claim_room re-reads them under the queue's lock). A change
-- wakes idle workers on the queue's channel, as a resume does: a raised limit
-- may have made room.
WITH s AS (
    INSERT INTO {schema}.queues AS q (queue, paused, updated_at, concurrency, rate_limit, rate_period)
    VALUES (%(queue)s, false, {now}, %(concurrency)s, %(rate_limit)s, %(rate_period)s)
    ON CONFLICT (queue) DO UPDATE SET concurrency = EXCLUDED.concurrency, rate_limit = EXCLUDED.rate_limit,
                                      rate_period = EXCLUDED.rate_period, updated_at = EXCLUDED.updated_at
    RETURNING q.queue
)
SELECT queue, pg_notify({channel}, queue)::text FROM s

-- name: queue_limits
-- Every queue with a limit, with what counts against it now: its running jobs
-- (a dead worker's among them until reaped) and its starts in the rate window.
SELECT q.queue, q.concurrency, q.rate_limit, q.rate_period,
       (SELECT count(*) FROM {schema}.jobs AS j WHERE j.state = 'running' AND j.queue = q.queue),
       (SELECT count(*) FROM {schema}.queue_starts AS s
        WHERE s.queue = q.queue AND q.rate_period IS NOT NULL
          AND s.started_at > {now} - make_interval(secs => q.rate_period))
FROM {schema}.queues AS q
WHERE q.concurrency IS NOT NULL OR q.rate_limit IS NOT NULL
ORDER BY q.queue

-- name: set_key_limits
-- A limit-key pattern's limits, set whole (issue 44): upserted, or deleted
-- when both are NULL (a pattern without limits is no pattern). The claims read
-- them from the next claim on (key_take re-reads them under the key's lock).
-- matcher and rank are worked out by the caller (key_patterns.py).
WITH gone AS (
    DELETE FROM {schema}.key_limits
    WHERE pattern = %(pattern)s AND %(concurrency)s::integer IS NULL AND %(rate_limit)s::integer IS NULL
)
INSERT INTO {schema}.key_limits AS l (pattern, matcher, rank, concurrency, rate_limit, rate_period, updated_at)
SELECT %(pattern)s, %(matcher)s, %(rank)s, %(concurrency)s, %(rate_limit)s, %(rate_period)s, {now}
WHERE %(concurrency)s::integer IS NOT NULL OR %(rate_limit)s::integer IS NOT NULL
ON CONFLICT (pattern) DO UPDATE SET concurrency = EXCLUDED.concurrency, rate_limit = EXCLUDED.rate_limit,
                                    rate_period = EXCLUDED.rate_period, updated_at = EXCLUDED.updated_at
RETURNING l.pattern

-- name: key_limits
-- Every limit-key pattern, with what counts against it now: over the keys in
-- use (a job running, or a start in the window) that take their limits from
-- it (key_limit: their best match), how many, their running jobs (a dead
-- worker's among them until reaped), the most of any one key, and their
-- starts in the rate window. Keys in use are few (bounded by running jobs and
-- recent starts), so each is matched once here.
WITH used AS (
    SELECT b.pattern,
           (SELECT count(*) FROM {schema}.jobs AS j WHERE j.state = 'running' AND j.limit_key = k.limit_key) AS running,
           (SELECT count(*) FROM {schema}.key_starts AS s
            WHERE s.limit_key = k.limit_key AND b.rate_period IS NOT NULL
              AND s.started_at > {now} - make_interval(secs => b.rate_period)) AS started
    FROM (SELECT limit_key FROM {schema}.jobs WHERE state = 'running' AND limit_key IS NOT NULL
          UNION SELECT limit_key FROM {schema}.key_starts) AS k
    CROSS JOIN LATERAL {schema}.key_limit(k.limit_key) AS b
)
SELECT l.pattern, l.concurrency, l.rate_limit, l.rate_period,
       count(u.pattern) FILTER (WHERE u.running > 0 OR u.started > 0),
       coalesce(sum(u.running), 0)::bigint, coalesce(max(u.running), 0), coalesce(sum(u.started), 0)::bigint
FROM {schema}.key_limits AS l LEFT JOIN used AS u ON u.pattern = l.pattern
GROUP BY l.pattern, l.concurrency, l.rate_limit, l.rate_period
ORDER BY l.pattern

-- ---------------------------------------------------------------------------
-- Waiting (issue 22): who waits for which job, so that the finished-job
-- trigger notifies only those (migration 0008 says why).

-- name: watch_finished
-- One waiter, until %(seconds)s from now. The same statement deletes the rows
-- that can no longer matter (expired: their process died before unwatching),
-- so the table stays as small as the number of waits in progress. A live
-- wait's row never expires before its deadline, and a wait without one
-- registers for a day.
WITH gone AS (
    DELETE FROM {schema}.waiters WHERE expires_at <= now()
)
INSERT INTO {schema}.waiters (job_id, expires_at)
VALUES (%(job_id)s, now() + make_interval(secs => %(seconds)s))
RETURNING id

-- name: unwatch_finished
DELETE FROM {schema}.waiters WHERE id = %(id)s

-- Finding and acting on many jobs (issue 43; store/many.py) -------------------

-- name: _job_filter
-- The filters of app.jobs() and of the bulk actions (search.JobFilter), ANDed;
-- a NULL parameter is a filter not given. Unqualified columns: the statement
-- reads the jobs table alone. A search plans each call with its values (a
-- custom plan), so the NULL tests fold away and the filters left pick their
-- indexes: tags and meta containment the partial GIN indexes of migration
-- 0013 (a strict @> implies their IS NOT NULL), state with finished_at
-- jobs_finished_idx, queue and task the claim indexes; the id order the
-- primary key. Times are half-open: after <= t < before.
(%(states)s::text[] IS NULL OR state = ANY(%(states)s::text[]))
AND (%(ids)s::bigint[] IS NULL OR id = ANY(%(ids)s::bigint[]))
AND (%(queue)s::text IS NULL OR queue = %(queue)s::text)
AND (%(task)s::text IS NULL OR task = %(task)s::text)
AND (%(tags)s::jsonb IS NULL OR tags @> %(tags)s::jsonb)
AND (%(meta)s::jsonb IS NULL OR meta @> %(meta)s::jsonb)
AND (%(args)s::jsonb IS NULL OR args @> %(args)s::jsonb)
AND (%(created_after)s::timestamptz IS NULL OR created_at >= %(created_after)s::timestamptz)
AND (%(created_before)s::timestamptz IS NULL OR created_at < %(created_before)s::timestamptz)
AND (%(finished_after)s::timestamptz IS NULL OR finished_at >= %(finished_after)s::timestamptz)
AND (%(finished_before)s::timestamptz IS NULL OR finished_at < %(finished_before)s::timestamptz)

-- name: search_jobs
-- A page of app.jobs(): newest first, keyset-paged on the id (an id never
-- changes, so a walk neither repeats nor skips a job that matches throughout,
-- whatever is inserted or finished meanwhile: new jobs have higher ids).
-- For a common tag or meta value (and for the other filters) the planner
-- walks the primary key newest first and stops at the page's end; for a
-- rare one postgres/many.py runs search_jobs_few instead.
SELECT {job_select}
FROM {schema}.jobs
WHERE {_job_filter}
  AND (%(before)s::bigint IS NULL OR id < %(before)s::bigint)
ORDER BY id DESC
LIMIT %(limit)s

-- name: search_estimate
-- How many rows the planner expects a search's filter to match (the top
-- node's "Plan Rows"; no row is read): postgres/many.py picks search_jobs or
-- search_jobs_few by it, for a tags or meta filter (issue 43, the rare-tag
-- first page). An estimate, not a count: its plan costs a millisecond.
EXPLAIN (FORMAT JSON)
SELECT id FROM {schema}.jobs
WHERE {_job_filter}
  AND (%(before)s::bigint IS NULL OR id < %(before)s::bigint)

-- name: search_jobs_few
-- search_jobs for a filter the planner expects to match few rows (below
-- many.FEW_ROWS): the matching ids come from the filter's own index (the
-- tags or meta GIN index: a bitmap of every match), the newest `limit` of
-- them by a top-N sort of bare ids, then their rows by the primary key.
-- `ORDER BY id + 0` keeps the planner off the primary key's order: on its
-- own it walks the primary key newest first for any tag it expects on 1% of
-- the rows, assuming the matches spread evenly, and when the newest rows
-- hold none (100,000 queued jobs of another tag) it reads all of them
-- first: 110,000 rows for a page of bench/many_jobs.py's 1%-tag, where this
-- reads its 10,000 matches. Sorting ids, not rows, keeps the sort small.
SELECT {job_select}
FROM {schema}.jobs
WHERE id = ANY(ARRAY(
    SELECT id FROM {schema}.jobs
    WHERE {_job_filter}
      AND (%(before)s::bigint IS NULL OR id < %(before)s::bigint)
    ORDER BY id + 0 DESC
    LIMIT %(limit)s))
ORDER BY id DESC

-- name: count_jobs
SELECT count(*) FROM {schema}.jobs WHERE {_job_filter}

-- name: cancel_many
-- A batch of cancel: the next `limit` matching queued jobs, and running ones
-- not yet asked, above `after` in id order. SKIP LOCKED: a row a claim,
-- heartbeat or ending holds is passed over, not waited for (a heartbeat
-- locks a worker's rows in its own order: waiting could deadlock); the
-- caller repeats its walk until a pass cancels nothing, so a passed-over job
-- is taken by the next pass (many.py). As cancel does, judged on the row:
-- queued ends cancelled at once (an ending: _ending), running gets a cancel
-- request its worker reads from its next heartbeat. Answer: how many were
-- affected, the last id picked (NULL: no more), and, only when %(report)s
-- (an app with a job.cancelled hook: many.py), [id, task, queue] of each job
-- cancelled at once, for its event; NULL otherwise, so a bulk cancel nobody
-- listens to builds no JSON. Last, what jobs_ended finished and released (the
-- ending statements' last column, which PostgresStore._all strips: FLOW_ANSWERS).
WITH picked AS (
    SELECT id FROM {schema}.jobs
    WHERE {_job_filter}
      AND (state = 'queued' OR (state = 'running' AND NOT cancel_requested))
      AND id > %(after)s
    ORDER BY id
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
), ended AS (
    UPDATE {schema}.jobs AS j
    SET state = CASE WHEN j.state = 'queued' THEN 'cancelled' ELSE j.state END,
        finished_at = CASE WHEN j.state = 'queued' THEN {now} ELSE j.finished_at END,
        cancel_requested = (j.state = 'running')
    WHERE j.id = ANY(ARRAY(SELECT id FROM picked)) AND j.state IN ('queued', 'running')
    RETURNING j.id, j.state, j.task, j.queue
), {_ending}
SELECT (SELECT count(*) FROM {_ended}), (SELECT max(id) FROM picked),
       CASE WHEN %(report)s::boolean
            THEN (SELECT json_agg(json_build_array(id, task, queue)) FROM ended WHERE state = 'cancelled') END,
       (SELECT min(f) FROM woken)

-- name: retry_many
-- A batch of retry (as retry: queued now, with an attempt left) over the
-- next `limit` matching dead or cancelled jobs above `after`. FOR UPDATE
-- (waits): a finished row is locked only by another operator's statement or
-- the pruner, briefly, and a passed-over row would be missed (a retried job
-- can die again during the walk, so the walk is not repeated). A job whose
-- dedup key an active job holds stays as it is, and of several with one key
-- only the newest is retried (the unique dedup index allows one active job
-- per key). As retry, the workflow steps and batch counts a retried job's
-- ending had settled wait for it again (jobs_reopened, only for a job with
-- dependents). Answer: a row per retried job (id, queue) and the last id
-- picked on each (one row with NULLs when none was retried).
WITH picked AS (
    SELECT id FROM {schema}.jobs AS c
    WHERE {_job_filter}
      AND state IN ('dead', 'cancelled')
      AND id > %(after)s
      AND (dedup_key IS NULL
           OR (NOT EXISTS (SELECT 1 FROM {schema}.jobs AS a
                           WHERE a.dedup_key = c.dedup_key AND a.state IN ('queued', 'running'))
               AND id = (SELECT max(b.id) FROM {schema}.jobs AS b
                         WHERE b.dedup_key = c.dedup_key AND b.state IN ('dead', 'cancelled'))))
    ORDER BY id
    LIMIT %(limit)s
    FOR UPDATE
), done AS (
    UPDATE {schema}.jobs AS j
    SET state = 'queued',
        run_at = {now},
        finished_at = NULL,
        cancel_requested = false,
        max_attempts = GREATEST(j.max_attempts, j.attempt - j.released + 1)
    WHERE j.id = ANY(ARRAY(SELECT id FROM picked)) AND j.state IN ('dead', 'cancelled')
    RETURNING j.id, j.queue
)
SELECT d.id, d.queue, m.last,
       CASE WHEN EXISTS (SELECT 1 FROM {schema}.job_deps AS x WHERE x.upstream_id = d.id)
            THEN {schema}.jobs_reopened(d.id)::text END
FROM (SELECT max(id) AS last FROM picked) AS m LEFT JOIN done AS d ON true

-- name: delete_many
-- A batch of delete over the next `limit` matching finished jobs above
-- `after`, with their attempts rows, as prune deletes (by the ctids picked
-- locked, SKIP LOCKED; the caller repeats its walk until a pass deletes
-- nothing). The DELETE checks the state once more: never a live job.
WITH picked AS (
    SELECT id, ctid FROM {schema}.jobs
    WHERE {_job_filter}
      AND state IN ('succeeded', 'dead', 'cancelled')
      AND id > %(after)s
    ORDER BY id
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
), gone AS (
    DELETE FROM {schema}.jobs AS j
    WHERE j.ctid = ANY(ARRAY(SELECT ctid FROM picked))
      AND j.state IN ('succeeded', 'dead', 'cancelled')
    RETURNING j.id
), audit AS (
    DELETE FROM {schema}.attempts AS a
    WHERE a.job_id = ANY(ARRAY(SELECT id FROM gone))
)
SELECT (SELECT count(*) FROM gone), (SELECT max(id) FROM picked)

-- name: rerun
-- app.rerun(): a new job copied from a finished one (task, args and options;
-- not its trace: the rerun is a new trace), queued now, rerun_of naming it.
-- A dedup key an active job holds again inserts nothing (as enqueue).
INSERT INTO {schema}.jobs (run_at, created_at, queue, task, args, priority, max_attempts, lease_ttl, timeout,
                           dedup_key, meta, exclusive_key, tags, backoff_base, rerun_of)
SELECT {now}, {now}, queue, task, args, priority, max_attempts, lease_ttl, timeout,
       dedup_key, meta, exclusive_key, tags, backoff_base, id
FROM {schema}.jobs
WHERE id = %(id)s AND state IN ('succeeded', 'dead', 'cancelled')
ON CONFLICT (dedup_key) WHERE dedup_key IS NOT NULL AND state IN ('queued', 'running')
DO NOTHING
RETURNING id
-- name: workflow_insert
-- A workflow run (issue 42): its id is the database's; the steps follow in
-- the same transaction (store/flows.py).
INSERT INTO {schema}.workflows (name, created_at) VALUES (%(name)s, {now}) RETURNING id

-- name: workflow_link
-- The steps of a run whose jobs were just inserted in this transaction: their
-- names, the edges, each waiting job's count of pending dependencies, and
-- those jobs moved to 'waiting' before anyone can see them (the transaction
-- has not committed), so no claim ever takes one early. Every step also
-- gets its edge to job 0 and the run counts them all open (migration 0017:
-- the ending of its last step finishes it).
WITH steps AS (
    INSERT INTO {schema}.workflow_steps (job_id, workflow_id, name)
    SELECT s.job_id, %(workflow)s, s.name FROM unnest(%(jobs)s::bigint[], %(names)s::text[]) AS s(job_id, name)
), deps AS (
    INSERT INTO {schema}.job_deps (upstream_id, job_id)
    SELECT u, d FROM unnest(%(ups)s::bigint[], %(downs)s::bigint[]) AS e(u, d)
    UNION ALL
    SELECT s, 0 FROM unnest(%(jobs)s::bigint[]) AS s
), opened AS (
    UPDATE {schema}.workflows SET open = cardinality(%(jobs)s::bigint[]) WHERE id = %(workflow)s
), waits AS (
    INSERT INTO {schema}.job_waits (job_id, pending, on_failure)
    SELECT w, p, o FROM unnest(%(waiting)s::bigint[], %(pending)s::int[], %(policies)s::text[]) AS x(w, p, o)
)
UPDATE {schema}.jobs SET state = 'waiting' WHERE id = ANY(%(waiting)s::bigint[]) RETURNING id

-- name: workflow_get
SELECT id, name, created_at FROM {schema}.workflows WHERE id = %(id)s

-- name: workflow_steps
-- A run's steps in the order they were added (their jobs' ids rise with it),
-- each with its job's state (NULL once retention deleted it) and the names of
-- the steps it waits for.
SELECT s.name, s.job_id, j.state, coalesce(w.on_failure, 'cancel'),
       ARRAY(SELECT u.name FROM {schema}.job_deps AS d
             JOIN {schema}.workflow_steps AS u ON u.job_id = d.upstream_id
             WHERE d.job_id = s.job_id ORDER BY u.job_id)
FROM {schema}.workflow_steps AS s
LEFT JOIN {schema}.jobs AS j ON j.id = s.job_id
LEFT JOIN {schema}.job_waits AS w ON w.job_id = s.job_id
WHERE s.workflow_id = %(id)s
ORDER BY s.job_id

-- name: job_workflow
SELECT workflow_id FROM {schema}.workflow_steps WHERE job_id = %(id)s

-- name: job_flow
-- A job's page (the dashboard): its workflow run and its batch edge (a member)
-- or batch (a callback), in one round trip of index probes: the step's key,
-- the edges' (upstream_id, job_id) key, the callbacks' partial indexes.
SELECT (SELECT workflow_id FROM {schema}.workflow_steps WHERE job_id = %(id)s),
       (SELECT -job_id FROM {schema}.job_deps WHERE upstream_id = %(id)s AND job_id < 0 LIMIT 1),
       COALESCE((SELECT id FROM {schema}.batches WHERE on_complete = %(id)s LIMIT 1),
                (SELECT id FROM {schema}.batches WHERE on_success = %(id)s LIMIT 1))

-- name: upstream_results
-- ctx.upstream, read when a handler asks (never by the claim): the direct
-- dependencies' step names, states and results.
SELECT u.name, j.state, j.result::text
FROM {schema}.job_deps AS d
JOIN {schema}.workflow_steps AS u ON u.job_id = d.upstream_id
JOIN {schema}.jobs AS j ON j.id = d.upstream_id
WHERE d.job_id = %(id)s
ORDER BY d.upstream_id

-- name: batch_insert
-- A batch (issue 42): its members' count is split over `shards` rows
-- (migration 0012 says why); its members and callbacks follow in this transaction.
INSERT INTO {schema}.batches (created_at, shards) VALUES ({now}, %(shards)s) RETURNING id

-- name: batch_link
-- The members' edges (to no job: -(batch * 16 + shard), the i-th member in
-- shard i mod shards), each shard's count, the callbacks held 'waiting'
-- before anyone can see them, and the batch's callback ids.
WITH members AS (
    SELECT x.m, mod(x.o - 1, %(shards)s)::int AS shard
    FROM unnest(%(members)s::bigint[]) WITH ORDINALITY AS x(m, o)
), edges AS (
    INSERT INTO {schema}.job_deps (upstream_id, job_id)
    SELECT m, -(%(batch)s * 16 + shard) FROM members
), counts AS (
    INSERT INTO {schema}.batch_shards (batch_id, shard, pending)
    SELECT %(batch)s, shard, count(*) FROM members GROUP BY shard
), held AS (
    UPDATE {schema}.jobs SET state = 'waiting' WHERE id = ANY(%(callbacks)s::bigint[])
)
UPDATE {schema}.batches SET on_complete = %(on_complete)s, on_success = %(on_success)s
WHERE id = %(batch)s RETURNING id

-- name: batch_of
-- The batch edge of a member: -(batch * 16 + shard).
SELECT -job_id FROM {schema}.job_deps WHERE upstream_id = %(id)s AND job_id < 0

-- name: batch_grow
-- ctx.batch.add: the adding member's shard counts the new members before they
-- exist, and only while it is not zero (its own member still running keeps it
-- above zero; a zero shard means the batch may be complete already).
UPDATE {schema}.batch_shards SET pending = pending + %(n)s
WHERE batch_id = %(batch)s AND shard = %(shard)s AND pending > 0
RETURNING pending

-- name: batch_join
INSERT INTO {schema}.job_deps (upstream_id, job_id)
SELECT m, %(edge)s FROM unnest(%(members)s::bigint[]) AS m
RETURNING upstream_id

-- name: batch_members
-- ctx.batch.member_ids: a page of a batch's members, ascending from after
-- (keyset paging: a callback of a 10,000-member batch reads them a page at
-- a time). The edges' job_id index gives the batch's 16 edge values.
SELECT d.upstream_id FROM {schema}.job_deps AS d
WHERE d.job_id BETWEEN -(%(id)s * 16 + 15) AND -(%(id)s * 16) AND d.upstream_id > %(after)s
ORDER BY d.upstream_id
LIMIT %(limit)s

-- name: batch_get
SELECT id, created_at, on_complete, on_success, finished_at FROM {schema}.batches WHERE id = %(id)s

-- name: batch_counts
-- Its members by state (the edges' job_id index: the batch's 16 edge values).
SELECT j.state, count(*)
FROM {schema}.job_deps AS d JOIN {schema}.jobs AS j ON j.id = d.upstream_id
WHERE d.job_id BETWEEN -(%(id)s * 16 + 15) AND -(%(id)s * 16)
GROUP BY j.state

-- name: batch_called
-- The batch whose callback a job is (a callback's ctx.batch).
SELECT id FROM {schema}.batches WHERE on_complete = %(id)s
UNION ALL
SELECT id FROM {schema}.batches WHERE on_success = %(id)s
