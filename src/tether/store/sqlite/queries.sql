-- tether's named queries for SQLite.
--
-- {now} is the one clock expression: coalesce(:now, <epoch seconds from
-- julianday('now')>), the machine's clock unless a test passes its own.
-- SQLite serialises writers, so a single UPDATE is atomic against every other
-- process on the file: no SKIP LOCKED is needed, and a claim can never hand one
-- row to two workers. Operations that write the audit row run as two statements
-- inside one BEGIN IMMEDIATE transaction (SQLite has no data-modifying CTEs).
-- Every fenced statement matches id AND attempt AND locked_by AND state = 'running'.

-- name: enqueue
-- Many rows, one statement: the jobs arrive as one JSON array of arrays, each
-- [run_at, delay, then the columns a NewJob fills in their declared order]
-- (store/columns.py: INSERTED; job_insert_json reads them from position 2).
-- "WHERE true" is SQLite's required disambiguation before ON CONFLICT in an
-- INSERT ... SELECT. A dedup hit inserts nothing; the caller looks it up.
-- A key is taken by an active job (tether_jobs_dedup_idx) or by a job with a
-- dedup window (tether_jobs_dedup_window_idx, migration 0012), as on
-- PostgreSQL. No conflict target: both indexes are arbiters (no other unique
-- index of the table can conflict with a new job). A job without a window of
-- its own is not in the window index, so the NOT EXISTS keeps it out while a
-- window holds its key: one write transaction, so that read decides alone.
-- (0001's index is kept as it was, and the window index leaves active jobs
-- to it, for a producer of the previous release: its ON CONFLICT names 0001's
-- predicate, and SQLite raises on a conflict in an index it did not name.)
INSERT INTO tether_jobs (run_at, created_at, {job_insert_columns})
SELECT coalesce(n.value ->> 0, {now} + (n.value ->> 1)), {now}, {job_insert_json}
FROM json_each(:jobs) AS n
WHERE {job_dedup_key_json} IS NULL
   OR NOT EXISTS (SELECT 1 FROM tether_jobs AS h WHERE h.dedup_key = {job_dedup_key_json} AND h.dedup_for IS NOT NULL)
ORDER BY n.key
ON CONFLICT DO NOTHING
RETURNING id, dedup_key

-- name: release_dedup
-- For an enqueue's dedup hits, first: the finished jobs among the keys' holders
-- whose dedup window has passed give their key up (dedup_for = NULL takes
-- them out of tether_jobs_dedup_window_idx), so that the enqueue inserts
-- again. In the enqueue's write transaction, as dedup_holders.
UPDATE tether_jobs SET dedup_for = NULL
WHERE dedup_key IN (SELECT value FROM json_each(:keys)) AND dedup_for IS NOT NULL
  AND state NOT IN ('queued', 'running') AND finished_at + dedup_for <= {now}

-- name: dedup_holders
-- The job holding each key: active, or with a window not yet released
-- (release_dedup ran first). Two branches, each the exact predicate of one
-- partial index (tether_jobs_dedup_idx, tether_jobs_dedup_window_idx), so
-- each is a search by key: one OR over both was a scan of the whole table.
SELECT id, dedup_key FROM tether_jobs
WHERE dedup_key IN (SELECT value FROM json_each(:keys)) AND state IN ('queued', 'running')
UNION ALL
SELECT id, dedup_key FROM tether_jobs
WHERE dedup_key IN (SELECT value FROM json_each(:keys)) AND dedup_for IS NOT NULL
  AND state NOT IN ('queued', 'running')

-- name: _grant_lease
-- The lease grant that claim and claim_ids share: running, attempt + 1 (the
-- fencing token), owner, lease_until capped at the attempt's deadline.
SET state = 'running',
    attempt = attempt + 1,
    locked_by = :worker,
    claimed_at = {now},
    deadline = {now} + timeout,
    lease_until = min({now} + coalesce(lease_ttl, :lease_ttl), coalesce({now} + timeout, 1e18)),
    cancel_requested = 0,
    progress = NULL,
    progress_message = NULL

-- name: _claimed_row
RETURNING id, attempt, task, args, queue, priority, max_attempts,
          coalesce(lease_ttl, :lease_ttl), timeout, claimed_at, meta, run_at, scheduled_for, trace

-- name: _open_queues
-- The worker's queues that a claim may take jobs from: those of :queues not
-- paused (tether_queues: app.pause), a FROM item (alias it) of one column,
-- name. Every claim and the transport sweep read their jobs through it, so
-- "claimable" means the same everywhere: queued, due (run_at <= now), on one
-- of these queues (as on PostgreSQL).
(SELECT m.value AS name FROM json_each(:queues) AS m
 WHERE m.value NOT IN (SELECT queue FROM tether_queues WHERE paused))

-- name: _rooms
-- (A CTE for the claims.) The worker's queues that are not paused
-- (_open_queues), each with its room: how many more jobs it may start now under its limits
-- (app.configure_queue), or NULL for a queue without limits. The running
-- count and the starts in the rate window are read inside the claim's own
-- statement; SQLite's one writer means no other claim commits in between, so
-- the counts are exact. A dead worker's jobs stay running, and count, until
-- the reaper ends them.
rooms AS (
    SELECT o.name, (
        SELECT min(coalesce(l.concurrency - (SELECT count(*) FROM tether_jobs AS r
                                             WHERE r.state = 'running' AND r.queue = l.queue), 2147483647),
                   coalesce(l.rate_limit - (SELECT count(*) FROM tether_queue_starts AS s
                                            WHERE s.queue = l.queue AND s.started_at > {now} - l.rate_period),
                            2147483647))
        FROM tether_queues AS l
        WHERE l.queue = o.name AND (l.concurrency IS NOT NULL OR l.rate_limit IS NOT NULL)) AS room
    FROM {_open_queues} AS o
)

-- name: _due
-- (A condition on a queued job j.) Due, and not expired: claimable from its
-- run_at up to and including its expires_at (issue 44; NULL: never), so an
-- expired job is never started, whatever the expiry service swept yet. The
-- expiry is a filter on the rows tether_jobs_claim_idx hands over in order.
j.run_at <= {now} AND {now} <= coalesce(j.expires_at, 1e18)

-- name: _key_free
-- (A condition on a queued job j.) Its exclusive key, if it has one, is free:
-- no job with the key is running, and j is the first queued, due job of its
-- key (priority, then run_at, then id), so one claim never starts two. Both
-- are seeks on tether_jobs_exclusive_idx (exclusive_key, state, priority
-- DESC, run_at, id: migration 0008), whose order is the subquery's.
-- Then its limit key, if it has one, has room: tether_key_take (keys.py)
-- takes one of it (key_room below, once per key and statement). Rows
-- without a key pay one IS NULL test.
(j.exclusive_key IS NULL OR (
    NOT EXISTS (SELECT 1 FROM tether_jobs AS x WHERE x.exclusive_key = j.exclusive_key AND x.state = 'running')
    AND j.id = (SELECT y.id FROM tether_jobs AS y
                WHERE y.exclusive_key = j.exclusive_key AND y.state = 'queued' AND y.run_at <= {now}
                ORDER BY y.priority DESC, y.run_at, y.id LIMIT 1)))
AND (j.limit_key IS NULL OR tether_key_take(:round, {now}, j.limit_key))

-- name: _pick
-- (The claims' choice, inside WHERE id IN (...), after a WITH that defines
-- rooms (_rooms) and tasks: the task names to claim.) Every branch reads a
-- bounded number of rows however many jobs wait. SQLite walks
-- tether_jobs_claim_idx (queue, task, priority DESC, run_at, id) once for each
-- (queue, task) pair that queue IN and task IN make, each walk already in
-- claim order, and stops each one after LIMIT rows; only those are sorted.
-- A claim that read a queue's due rows and then sorted or numbered them all
-- (a window over the queue, or no task to look up by) took 157 ms against a
-- backlog of 100,000 jobs, ten times what it took against 10,000.
SELECT id FROM (
    -- queues without limits: the best :limit due jobs, as always
    SELECT * FROM (
        SELECT j.id, j.priority, j.run_at FROM tether_jobs AS j
        WHERE j.state = 'queued' AND {_due}
          AND j.queue IN (SELECT name FROM rooms WHERE room IS NULL)
          AND j.task IN (SELECT name FROM tasks)
          AND {_key_free}
        ORDER BY j.priority DESC, j.run_at, j.id
        LIMIT :limit)
    UNION ALL
    -- limited queues: each one's best :limit due jobs (the correlated subquery
    -- walks as above; SQLite's LIMIT cannot name the room), numbered, and no
    -- more of them than its room
    SELECT id, priority, run_at FROM (
        SELECT c.id, c.priority, c.run_at, r.room,
               row_number() OVER (PARTITION BY c.queue ORDER BY c.priority DESC, c.run_at, c.id) AS nth
        FROM rooms AS r CROSS JOIN tether_jobs AS c  -- CROSS: rooms drives; no limited queue, no scan
        WHERE r.room > 0 AND c.id IN (
            SELECT j.id FROM tether_jobs AS j
            WHERE j.queue = r.name AND j.state = 'queued' AND {_due}
              AND j.task IN (SELECT name FROM tasks)
              AND {_key_free}
            ORDER BY j.priority DESC, j.run_at, j.id
            LIMIT :limit))
    WHERE nth <= room)
ORDER BY priority DESC, run_at, id
LIMIT :limit

-- name: _queued_tasks
-- (A recursive CTE.) The task names with queued jobs on the worker's queues,
-- for the statements that take no task list: a skip scan of
-- tether_jobs_claim_idx, one index seek per (queue, task) pair (the next
-- name after the last one found), not a read of every queued job. A queue
-- with none yields one NULL row, which IN never matches.
tasks(queue, name) AS (
    SELECT m.value, (SELECT min(t.task) FROM tether_jobs AS t WHERE t.state = 'queued' AND t.queue = m.value)
    FROM json_each(:queues) AS m
    UNION ALL
    SELECT k.queue, (SELECT min(t.task) FROM tether_jobs AS t
                     WHERE t.state = 'queued' AND t.queue = k.queue AND t.task > k.name)
    FROM tasks AS k
    WHERE k.name IS NOT NULL
)

-- name: claim
-- The subquery (_pick) walks tether_jobs_claim_idx; the UPDATE grants the lease
-- and bumps attempt (the fencing token) in the same statement. lease_until is
-- capped at the attempt's deadline so one index finds lapsed and timed-out rows.
-- Paused queues (tether_queues: app.pause) are left out of the list, and
-- limited queues (app.configure_queue) give no more than their room (_rooms);
-- a job whose exclusive key is held waits (_key_free). Without a task list the
-- tasks are those with queued jobs (_queued_tasks), so the walks stay bounded.
UPDATE tether_jobs
{_grant_lease}
WHERE id IN (
    WITH RECURSIVE {_rooms}, {_queued_tasks}
    {_pick}
)
{_claimed_row}

-- name: claim_known
-- claim, of the tasks the worker knows only: a job of any other task stays
-- queued, its budget untouched, for a worker that knows it. tether_jobs_claim_idx
-- leads with (queue, task) (migration 0006), so the rows are looked up by
-- (queue = ? AND task = ?) for each pair and the jobs of tasks the worker
-- does not know are never read, however many wait at the head of the queue.
-- Paused queues are left out of the list, and limits and keys obeyed, as in claim.
UPDATE tether_jobs
{_grant_lease}
WHERE id IN (
    WITH {_rooms}, tasks(name) AS (SELECT value FROM json_each(:tasks))
    {_pick}
)
{_claimed_row}

-- name: claim_ids
-- A transport (NATS) delivered these ids; the database decides who owns them.
-- The same grant as claim, for the named rows only, and only while each is
-- still queued, due and on one of the worker's queues: a job someone else
-- holds (running), a finished one, one not due yet, or one of a task the
-- worker does not know (:tasks, when given) matches nothing, and the caller
-- skips it. Two workers handed the same id: SQLite runs one UPDATE
-- at a time, so the second finds the row running and takes nothing. A
-- limited queue's ids are taken up to its room (lowest ids first), and a job
-- whose exclusive key is held is not taken: the sweep delivers both again.
UPDATE tether_jobs
{_grant_lease}
WHERE id IN (
    WITH {_rooms}
    SELECT id FROM (
        SELECT j.id, r.room, row_number() OVER (PARTITION BY j.queue ORDER BY j.id) AS nth
        FROM tether_jobs AS j JOIN rooms AS r ON r.name = j.queue
        WHERE j.id IN (SELECT value FROM json_each(:ids))
          AND j.state = 'queued' AND {_due}
          AND (:tasks IS NULL OR j.task IN (SELECT value FROM json_each(:tasks)))
          AND {_key_free})
    WHERE room IS NULL OR nth <= room)
{_claimed_row}

-- name: due_unclaimed
-- The transport sweep: queued jobs that are due and that no delivery seems to
-- be carrying: due for longer than :grace seconds (the publish after enqueue
-- failed, or the message was lost), or due later than they were created
-- (delayed jobs and retries, which nothing publishes until they are due; an
-- immediate job's run_at is exactly its created_at, one {now} in one statement).
-- Walks tether_jobs_claim_idx in claim order, bounded per tick: queue IN and
-- task IN (every task with queued jobs, _queued_tasks) make the walks per
-- (queue, task) pair that stop after :limit rows, as the claims' do (_pick).
WITH RECURSIVE {_queued_tasks}
SELECT id, queue, attempt, run_at
FROM tether_jobs
WHERE state = 'queued' AND run_at <= {now}
  AND queue IN (SELECT name FROM {_open_queues} AS o)
  AND task IN (SELECT name FROM tasks)
  AND (run_at <= {now} - :grace OR run_at > created_at)
ORDER BY priority DESC, run_at, id
LIMIT :limit

-- name: touch_worker
UPDATE tether_workers SET last_seen = {now} WHERE id = :worker

-- name: heartbeat
-- One statement for all the worker's held jobs: the (id, attempt) pairs arrive
-- as a JSON array. A pair whose fence fails is not returned: "lost".
-- The lease is capped at the attempt's deadline; at or past it there is no
-- lease left to renew (the new lease_until would already be in the past), so
-- the row is left out too and reads as "lost", unwritten, rather than
-- "renewed" while the reaper is about to time the attempt out.
UPDATE tether_jobs
SET lease_until = min({now} + coalesce(lease_ttl, :lease_ttl), coalesce(deadline, 1e18))
FROM (SELECT h.value ->> 0 AS id, h.value ->> 1 AS attempt FROM json_each(:held) AS h) AS held
WHERE tether_jobs.id = held.id AND tether_jobs.attempt = held.attempt
  AND tether_jobs.locked_by = :worker AND tether_jobs.state = 'running'
  AND (tether_jobs.deadline IS NULL OR tether_jobs.deadline > {now})
RETURNING tether_jobs.id, tether_jobs.cancel_requested

-- name: progress
-- Progress is a heartbeat: same fence, same lease extension, and the same
-- refusal at or past the attempt's deadline (the caller raises StaleAttempt;
-- the reaper times the attempt out).
UPDATE tether_jobs
SET progress = :fraction,
    progress_message = :message,
    lease_until = min({now} + coalesce(lease_ttl, :lease_ttl), coalesce(deadline, 1e18))
WHERE id = :id AND attempt = :attempt AND locked_by = :worker AND state = 'running'
  AND (deadline IS NULL OR deadline > {now})
RETURNING cancel_requested

-- name: complete
-- An ending (store/sqlite/ending.py): many completions, one statement, each
-- row fenced on its own attempt; its outcome NULL (no attempts row). A job
-- that reported progress ends at 1 (100%), not at its last report.
-- The success's audit is the row itself, as on PostgreSQL (its queries.sql,
-- _complete_done, says why): locked_by stays, the worker whose attempt
-- succeeded, beside attempt, claimed_at and finished_at; the readers of
-- attempts read successes from here (_successes). No attempts row is written:
-- a row and two index entries per job less in the worker's write transaction.
UPDATE tether_jobs
SET state = 'succeeded',
    result = done.result,
    progress = CASE WHEN tether_jobs.progress IS NULL THEN NULL ELSE 1 END,
    finished_at = {now},
    lease_until = NULL,
    deadline = NULL
FROM (SELECT d.value ->> 0 AS id, d.value ->> 1 AS attempt, d.value ->> 2 AS result
      FROM json_each(:done) AS d) AS done
WHERE tether_jobs.id = done.id AND tether_jobs.attempt = done.attempt
  AND tether_jobs.locked_by = :worker AND tether_jobs.state = 'running'
RETURNING tether_jobs.id, 'succeeded', NULL, NULL, NULL, NULL, NULL, NULL, NULL, {_dependents}

-- name: audit
-- The attempt's row in the attempts table, from an ending's RETURNING row as
-- it is (store/sqlite/ending.py): id, state (not stored here), outcome,
-- attempt, worker, claimed_at, finished_at, error, traceback, which end()
-- passes in this statement's order. Plain ? placeholders: numbered ones (?4)
-- are named ones to Python 3.12's sqlite3, which deprecates binding them from
-- a sequence (an error from 3.14; under pytest's filterwarnings=error every
-- failure's report failed, over and over).
INSERT INTO tether_attempts (job_id, attempt, worker, claimed_at, finished_at, outcome, error, traceback)
VALUES (?, ?, ?, ?, ?, ?, ?, ?)

-- name: fail
-- An ending (store/sqlite/ending.py, which writes its attempts row).
-- The retry-or-dead choice (as on PostgreSQL): a cancelled attempt, or a job
-- with a pending cancel request, ends cancelled (a retry would lose the
-- operator's cancel: the next claim clears cancel_requested); a spent budget
-- or a non-retryable error ends dead; otherwise queued again after
-- base * 2^(failures-1) seconds, capped at an hour, with half of it jittered,
-- or after :delay seconds when the task's callable retry_backoff chose them.
-- A snooze ('snoozed': tether.Retry(delay)) is a hand-back, as on PostgreSQL:
-- queued at now + delay with released + 1, the budget untouched; but only
-- while the job has been handed back fewer than :max_released times (issue
-- 41: a worker token snoozed one job 300 times in 2 s). Past it a snooze is a
-- failure like any other: it spends the budget.
UPDATE tether_jobs
SET state = CASE
        WHEN :outcome = 'cancelled' OR cancel_requested THEN 'cancelled'
        WHEN (:outcome = 'snoozed' AND released < :max_released) THEN 'queued'
        WHEN NOT :retry OR attempt - released >= max_attempts THEN 'dead'
        ELSE 'queued' END,
    run_at = CASE
        WHEN :outcome = 'cancelled' OR cancel_requested THEN run_at
        WHEN (:outcome = 'snoozed' AND released < :max_released) THEN {now} + coalesce(:delay, 0)
        WHEN NOT :retry OR attempt - released >= max_attempts THEN run_at
        ELSE {now} + coalesce(:delay, min(3600, backoff_base * (1 << min(attempt - released - 1, 12)))
                                      * (0.5 + 0.5 * ((random() & 1048575) / 1048576.0)))
        END,
    released = CASE WHEN (:outcome = 'snoozed' AND released < :max_released) AND NOT cancel_requested THEN released + 1 ELSE released END,
    finished_at = CASE
        WHEN :outcome = 'cancelled' OR cancel_requested THEN {now}
        WHEN (:outcome = 'snoozed' AND released < :max_released) THEN NULL
        WHEN NOT :retry OR attempt - released >= max_attempts THEN {now} END,
    -- a snooze is no error: the job's last one stays what it was
    last_error = CASE WHEN (:outcome = 'snoozed' AND released < :max_released) THEN last_error ELSE :error END,
    locked_by = NULL,
    lease_until = NULL,
    deadline = NULL
WHERE id = :id AND attempt = :attempt AND locked_by = :worker AND state = 'running'
RETURNING id, state, :outcome, attempt, :worker, claimed_at, {now}, :error, :traceback, {_dependents}

-- name: release
-- An ending (store/sqlite/ending.py), when a cancel was pending; otherwise a
-- graceful hand-back: released + 1 so the next claim does not spend the budget;
-- run_at kept, so the job keeps its place in the claim order (as reap_one).
UPDATE tether_jobs
SET state = CASE WHEN cancel_requested THEN 'cancelled' ELSE 'queued' END,
    finished_at = CASE WHEN cancel_requested THEN {now} END,
    released = released + 1,
    run_at = min(run_at, {now}),
    locked_by = NULL,
    lease_until = NULL,
    deadline = NULL
WHERE id = :id AND attempt = :attempt AND locked_by = :worker AND state = 'running'
RETURNING id, state, 'released', attempt, :worker, claimed_at, {now}, NULL, NULL, {_dependents}

-- name: lapsed
-- Reaper, step 1 (inside BEGIN IMMEDIATE, so nothing moves under us): the
-- oldest lapsed leases over tether_jobs_reap_idx, bounded per tick.
SELECT id, attempt, locked_by, claimed_at,
       (deadline IS NOT NULL AND deadline <= {now}) AS timed_out, queue, lease_until
FROM tether_jobs
WHERE state = 'running' AND lease_until < {now}
ORDER BY lease_until
LIMIT :limit

-- name: reap_one
-- Reaper, step 2, an ending (store/sqlite/ending.py): the retry-or-dead path,
-- re-checking the fence found in step 1, whose owner and claim time it returns
-- for the attempts row (RETURNING sees the row as updated: locked_by is gone).
-- Due again at once (no backoff) so I5's recovery bound holds; the lapse still
-- counts against max_attempts. run_at is kept (it was due before its claim): the
-- job keeps its place in its queue's and its key's claim order.
UPDATE tether_jobs
SET state = CASE
        WHEN cancel_requested THEN 'cancelled'
        WHEN attempt - released >= max_attempts THEN 'dead'
        ELSE 'queued' END,
    run_at = min(run_at, {now}),
        finished_at = CASE WHEN cancel_requested OR attempt - released >= max_attempts THEN {now} END,
    last_error = CASE WHEN :timed_out
        THEN 'attempt timed out after ' || timeout || 's (worker ' || locked_by || ')'
        ELSE 'worker lease expired (worker ' || locked_by || ')' END,
    locked_by = NULL,
    lease_until = NULL,
    deadline = NULL
WHERE id = :id AND attempt = :attempt AND state = 'running'
RETURNING id, state, CASE WHEN :timed_out THEN 'timed_out' ELSE 'lease_expired' END, attempt, :worker,
          :claimed_at, {now}, last_error, NULL, {_dependents}

-- name: lapse_leases
-- Start-up reconciliation: these workers are provably dead, so their leases end
-- now; the reap that follows recovers their jobs through the normal path.
-- RETURNING lets the caller count the rows through the usual error mapping.
UPDATE tether_jobs
SET lease_until = {now} - 0.000001
WHERE state = 'running' AND locked_by IN (SELECT value FROM json_each(:workers))
RETURNING id

-- name: cancel
-- An ending (store/sqlite/ending.py) of a queued job, which ran no attempt
-- (outcome NULL). Judged on the old row: queued ends cancelled at once;
-- running gets a request (and stays running: no ending).
-- A waiting job (a workflow step, issue 42) is cancelled as a queued one is.
UPDATE tether_jobs
SET state = CASE WHEN state = 'running' THEN state ELSE 'cancelled' END,
    finished_at = CASE WHEN state = 'running' THEN finished_at ELSE {now} END,
    cancel_requested = (state = 'running')
WHERE id = :id AND state IN ('waiting', 'queued', 'running')
RETURNING id, state, NULL, NULL, NULL, NULL, NULL, NULL, NULL, {_dependents}

-- name: retry
-- An operator's second chance for a dead or cancelled job: queued now, with at
-- least one attempt left. The queue comes back so that the caller can
-- announce the job on a transport (NATS) once this has committed.
UPDATE tether_jobs
SET state = 'queued',
    run_at = {now},
    finished_at = NULL,
    cancel_requested = 0,
    max_attempts = max(max_attempts, attempt - released + 1)
WHERE id = :id AND state IN ('dead', 'cancelled')
RETURNING queue, {_dependents}

-- name: job_state
SELECT state FROM tether_jobs WHERE id = :id

-- name: get_job
-- job_select: every column a Job is made of, in the declared order
-- (store/columns.py: READ), which rows.job_from_row reads by name.
SELECT {job_select}
FROM tether_jobs WHERE id = :id

-- name: _live_owner
-- A job's locked_by as the API gives it: its owner while it has one (a
-- succeeded row keeps its last attempt's worker: complete).
CASE WHEN state = 'succeeded' THEN NULL ELSE locked_by END AS locked_by

-- name: _successes
-- The attempts rows a success leaves on its job row (complete), shaped as
-- tether_attempts' rows, for the readers of attempts to add to that table's
-- (a FROM item). locked_by IS NOT NULL leaves out successes that wrote an
-- attempts row instead (before this was so, or by a worker of an older
-- release): one attempt is never counted twice.
SELECT id AS job_id, attempt, locked_by AS worker, claimed_at, finished_at, 'succeeded' AS outcome,
       NULL AS error, NULL AS traceback
FROM tether_jobs WHERE state = 'succeeded' AND locked_by IS NOT NULL

-- name: get_attempts
SELECT job_id, attempt, worker, claimed_at, finished_at, outcome, error, traceback
FROM tether_attempts WHERE job_id = :id
UNION ALL
SELECT * FROM ({_successes} AND id = :id)
ORDER BY attempt

-- name: get_attempts_newest
-- get_job's history (issue 41): the newest :limit attempts, newest first, each
-- with the job's count of attempts (count(*) OVER () is taken before the
-- LIMIT): a job snoozed or failed thousands of times would otherwise be read
-- whole, every error and traceback of it, on every look at the job. The
-- attempts primary key (job_id, attempt) hands them over in order.
SELECT job_id, attempt, worker, claimed_at, finished_at, outcome, error, traceback, count(*) OVER () AS total
FROM (
    SELECT job_id, attempt, worker, claimed_at, finished_at, outcome, error, traceback
    FROM tether_attempts WHERE job_id = :id
    UNION ALL
    SELECT * FROM ({_successes} AND id = :id)
)
ORDER BY attempt DESC
LIMIT :limit

-- name: recent_attempts
-- Finished attempts with one of these outcomes, newest first (the dashboard's
-- recoveries: lease_expired rows are written by the reaper). A scan of the
-- attempts table bounded by LIMIT; it is an operator's page, not a hot path.
-- Successes are read off their job rows (_successes), and only when asked for:
-- :successes is a bare parameter, a constant term SQLite tests once before the
-- scan (a test of :outcomes there was run on every job row). Their own ORDER
-- BY and LIMIT let tether_jobs_finished_idx (state, finished_at) hand over the
-- newest successes without a sort of them all.
SELECT * FROM (
    SELECT job_id, attempt, worker, claimed_at, finished_at, outcome, error, traceback
    FROM tether_attempts
    WHERE outcome IN (SELECT value FROM json_each(:outcomes))
    UNION ALL
    SELECT * FROM ({_successes} AND :successes ORDER BY finished_at DESC, id DESC LIMIT :limit)
)
ORDER BY finished_at DESC, job_id DESC
LIMIT :limit

-- name: throughput
-- Finished attempts per time bucket and outcome in [:start, :end), epoch
-- seconds the caller aligned to the bucket size (store/buckets.py); the
-- bucket index is the offset from :start divided by the size, truncated.
-- Cost: a range scan of tether_attempts_finished_idx (migration 0002), which
-- holds (finished_at, outcome), so only the window's entries are read and the
-- table never is: an hour of a busy queue is its rows in that hour, however
-- long the history. Without the index this is a scan of every attempt ever
-- recorded, on every render of the overview (every 2 s in live mode).
-- Successes are counted off the job rows, every one of them: a succeeded job
-- had exactly one succeeded attempt, which finished when the job did, whether
-- its record is the row itself (complete) or also an attempts row (a success
-- written by an older release, left out of the attempts branch here). So both
-- branches are covering index scans: tether_jobs_finished_idx (state,
-- finished_at) for the successes, and the table is still never read.
SELECT CAST((finished_at - :start) / :bucket AS INTEGER) AS bucket, outcome, count(*)
FROM (
    SELECT finished_at, outcome FROM tether_attempts
    WHERE finished_at >= :start AND finished_at < :end AND outcome <> 'succeeded'
    UNION ALL
    SELECT finished_at, 'succeeded' FROM tether_jobs
    WHERE state = 'succeeded' AND finished_at >= :start AND finished_at < :end
)
GROUP BY bucket, outcome

-- name: list_jobs
SELECT {job_select}
FROM tether_jobs
WHERE (:state IS NULL OR state = :state)
  AND (:queue IS NULL OR queue = :queue)
  AND (:task IS NULL OR task = :task)
ORDER BY id DESC
LIMIT :limit

-- name: counts
SELECT queue, state, count(*) FROM tether_jobs GROUP BY queue, state

-- name: oldest_queued
SELECT queue, min(run_at) FROM tether_jobs
WHERE state = 'queued' AND run_at <= {now}
GROUP BY queue

-- name: register_worker
-- owner (a tether server's fingerprint of the registering token) is set only
-- by the insert. A re-registration refreshes the row when it comes from the
-- same owner, or from a trusted caller (:owner NULL: this database's own
-- workers, a server's admin token); from another token it changes nothing,
-- and the server, reading the owner back (worker_owners), refuses it. tasks
-- (the worker's task names, migration 0006) is refreshed with the row.
INSERT INTO tether_workers (id, host, pid, proc_start, started_at, last_seen, queues, concurrency, owner, tasks)
VALUES (:id, :host, :pid, :proc_start, {now}, {now}, :queues, :concurrency, :owner, :tasks)
ON CONFLICT (id) DO UPDATE SET last_seen = excluded.last_seen, stopped_at = NULL, tasks = excluded.tasks
WHERE :owner IS NULL OR tether_workers.owner = :owner

-- name: worker_owners
-- The owner of each of these workers that is registered (a tether server
-- checks that a worker token acts only for the workers it registered).
SELECT id, owner FROM tether_workers WHERE id IN (SELECT value FROM json_each(:ids))

-- name: stop_worker
UPDATE tether_workers SET stopped_at = {now} WHERE id = :id AND stopped_at IS NULL

-- name: list_workers
SELECT id, host, pid, proc_start, started_at, last_seen, queues, concurrency, stopped_at, tasks
FROM tether_workers
WHERE (:host IS NULL OR host = :host)
  AND (NOT :live_only OR stopped_at IS NULL)
ORDER BY started_at

-- name: list_workers_page
-- The dashboard's workers page, and a server's list (issue 41): one page of
-- them, live ones first, the most recently seen first. A server took 10,000
-- registrations of one token, and listing them all made a 90 MB answer.
SELECT id, host, pid, proc_start, started_at, last_seen, queues, concurrency, stopped_at, tasks
FROM tether_workers
WHERE (:host IS NULL OR host = :host)
  AND (NOT :live_only OR stopped_at IS NULL)
ORDER BY stopped_at IS NOT NULL, last_seen DESC, id
LIMIT :limit OFFSET :offset

-- name: count_workers
-- How many workers' rows there are: of one owner (a server's per-token cap),
-- serving :queue, only live ones (not stopped, seen in the last :since
-- seconds: a server's live-workers-per-queue cap), or all. The table is
-- bounded by those caps and by prune_workers: a scan of it is cheap.
SELECT count(*) FROM tether_workers
WHERE (:owner IS NULL OR owner = :owner)
  AND (NOT :live_only OR (stopped_at IS NULL AND last_seen >= {now} - :since))
  AND (:queue IS NULL OR EXISTS (SELECT 1 FROM json_each(queues) WHERE value = :queue))

-- name: prune_workers
-- Workers' rows past retention (issue 41): stopped :age seconds ago, or never
-- stopped (killed) and silent that long; the oldest first, at most :limit per
-- statement (the pruner repeats it), of one owner when :owner is set (a
-- server making room under a token's cap). Nothing refers to a worker's row:
-- its attempts keep the id as text.
DELETE FROM tether_workers WHERE id IN (
    SELECT id FROM tether_workers
    WHERE coalesce(stopped_at, last_seen) < {now} - :age
      AND (:owner IS NULL OR owner = :owner)
    ORDER BY coalesce(stopped_at, last_seen)
    LIMIT :limit)
RETURNING id

-- name: _known
-- The (queue, task) pairs that workers seen in the last :since seconds know
-- (a CTE body): every queue of each worker with every task it registered. A
-- worker from before tether_workers.tasks (NULL) claims any task: it knows
-- them all, which the pair (queue, NULL) says. The workers table is small and
-- read once per statement, not once per job. It ends with its WHERE, so that
-- a query may add a condition (live only).
SELECT q.value AS queue, t.value AS task
FROM tether_workers AS w, json_each(w.queues) AS q, json_each(coalesce(w.tasks, '[null]')) AS t
WHERE w.last_seen >= {now} - :since

-- name: unknown_tasks
-- For `tether status`, the dashboard and the metric: due queued jobs, by
-- (queue, task), whose task no live worker knows (none seen in the last
-- :since seconds and not stopped serves the queue with a handler of that
-- name). They wait, budget untouched, until one does. As on PostgreSQL, the
-- (queue, task) pairs with queued jobs come from a skip scan of
-- tether_jobs_claim_idx (queue, task, ...): one seek for each queue (the next
-- name after the last one found), then one for each of its tasks. Only the
-- jobs of the pairs no worker knows are read and counted. A GROUP BY over the
-- queued rows read every one of them, each minute in every worker (10 ms for
-- 60,000 queued jobs) and on each dashboard refresh. (A row-value comparison
-- (queue, task) > (...) would say it in one step, but SQLite's planner does
-- not walk the index by it: it read the table and sorted it.)
WITH RECURSIVE queues(name) AS (
    SELECT min(queue) FROM tether_jobs WHERE state = 'queued'
    UNION ALL
    SELECT (SELECT min(t.queue) FROM tether_jobs AS t WHERE t.state = 'queued' AND t.queue > q.name)
    FROM queues AS q
    WHERE q.name IS NOT NULL
), pairs(queue, task) AS (
    SELECT q.name, (SELECT min(t.task) FROM tether_jobs AS t WHERE t.state = 'queued' AND t.queue = q.name)
    FROM queues AS q
    WHERE q.name IS NOT NULL
    UNION ALL
    SELECT p.queue, (SELECT min(t.task) FROM tether_jobs AS t
                     WHERE t.state = 'queued' AND t.queue = p.queue AND t.task > p.task)
    FROM pairs AS p
    WHERE p.task IS NOT NULL
), known AS (
{_known}
      AND w.stopped_at IS NULL
), unknown AS MATERIALIZED (
    SELECT p.queue, p.task FROM pairs AS p
    WHERE p.task IS NOT NULL
      AND NOT EXISTS (SELECT 1 FROM known AS k WHERE k.queue = p.queue AND (k.task IS NULL OR k.task = p.task))
)
SELECT u.queue, u.task, count(*), min(j.run_at)
FROM unknown AS u
JOIN tether_jobs AS j ON j.queue = u.queue AND j.task = u.task
WHERE j.state = 'queued' AND j.run_at <= {now}
GROUP BY u.queue, u.task
ORDER BY u.queue, u.task

-- name: bury_unknown
-- An ending (store/sqlite/ending.py) without an attempt (outcome NULL).
-- The unknown-task service's rule (worker/unknown.py; see the PostgreSQL
-- query for the why): a job of a task that no worker serving its queue has
-- known for the grace period (none seen in the last :since seconds, running
-- or stopped), due for at least that long, ends dead with the reason
-- recorded. Only the caller's queues, oldest first, bounded. SQLite runs one
-- writer at a time, so a row is buried once.
WITH known AS (
{_known}
)
UPDATE tether_jobs
SET state = 'dead',
    finished_at = {now},
    last_error = 'unknown task ' || quote(task) || ': no worker serving queue ' || quote(queue)
                 || ' has known it for ' || printf('%g', :since) || 's (unknown_task_grace); `tether retry` once a worker has it'
WHERE id IN (
    SELECT j.id FROM tether_jobs AS j
    WHERE j.state = 'queued' AND j.queue IN (SELECT value FROM json_each(:queues))
      AND j.run_at <= {now} - :since
      AND NOT EXISTS (SELECT 1 FROM known AS k WHERE k.queue = j.queue AND (k.task IS NULL OR k.task = j.task))
    ORDER BY j.run_at, j.id
    LIMIT :limit
)
RETURNING id, state, NULL, NULL, NULL, NULL, NULL, NULL, NULL, queue, task, last_error, {_dependents}

-- name: expire
-- An ending (store/sqlite/ending.py) with an attempts row of outcome
-- 'expired'. The expiry service's rule (see the PostgreSQL query for the
-- why): queued jobs whose expires_at has passed end cancelled, attempt and
-- released both one up, oldest expiry first over tether_jobs_expiry_idx,
-- bounded. SQLite runs one writer at a time, so a row is swept once.
UPDATE tether_jobs
SET state = 'cancelled',
    finished_at = {now},
    attempt = attempt + 1,
    released = released + 1,
    last_error = 'expired: not started by its expires_at'
WHERE id IN (
    SELECT j.id FROM tether_jobs AS j
    WHERE j.state = 'queued' AND j.expires_at IS NOT NULL AND j.expires_at < {now}
    ORDER BY j.expires_at
    LIMIT :limit
)
RETURNING id, state, 'expired', attempt, :worker, {now}, {now}, last_error, NULL, queue, task, last_error, {_dependents}

-- name: db_now
SELECT {now}

-- name: set_result
-- The return value of a handler whose success ctx.transaction() already wrote
-- (fenced, in the handler's own transaction), which arrives after that commit.
-- Succeeded is terminal and only the attempt that held the job could have made
-- it so, with its worker kept on the row (complete; an older release's success
-- has it in an attempts row instead): these conditions name that attempt's
-- success and nothing else. Rewriting the same value is harmless.
UPDATE tether_jobs
SET result = :result
WHERE id = :id AND attempt = :attempt AND state = 'succeeded'
  AND (locked_by = :worker
       OR EXISTS (SELECT 1 FROM tether_attempts AS a
                  WHERE a.job_id = tether_jobs.id AND a.attempt = tether_jobs.attempt AND a.worker = :worker
                    AND a.outcome = 'succeeded'))
RETURNING id

-- ---------------------------------------------------------------------------
-- Schedules (I6: each tick of a schedule becomes at most one job).
-- As on PostgreSQL, the decider is the primary key of tether_schedule_ticks
-- (schedule, tick), inserted ON CONFLICT DO NOTHING. Here a fire is one
-- BEGIN IMMEDIATE transaction (read, compute the due ticks in Python, insert),
-- and SQLite runs one writer at a time, so two workers never decide the same
-- tick at once; the key still makes the second one's insert a no-op.

-- name: sync_schedule
-- One declared schedule, upserted (see PostgreSQL's sync_schedules for the
-- rules). SQLite evaluates every SET expression against the row as it was, so
-- the comparisons below see the old definition. Row values compare with IS
-- NOT, which treats NULLs (lease_ttl, timeout) as equal to each other.
-- A dynamic schedule (app.add_schedule) of the same name is left as it is.
INSERT INTO tether_schedules
    (name, cron, timezone, args, queue, priority, max_attempts, lease_ttl, timeout, backoff_base,
     catch_up, overlap, since, created_at, updated_at, last_seen)
VALUES (:name, :cron, :timezone, :args, :queue, :priority, :max_attempts, :lease_ttl, :timeout, :backoff_base,
        :catch_up, :overlap, {now}, {now}, {now}, {now})
ON CONFLICT (name) DO UPDATE SET
    cron = excluded.cron, timezone = excluded.timezone, args = excluded.args, queue = excluded.queue,
    priority = excluded.priority, max_attempts = excluded.max_attempts, lease_ttl = excluded.lease_ttl,
    timeout = excluded.timeout, backoff_base = excluded.backoff_base, catch_up = excluded.catch_up,
    overlap = excluded.overlap,
    version = version + ((cron, timezone, args, queue, priority, max_attempts, lease_ttl, timeout, backoff_base,
                          catch_up, overlap)
                         IS NOT (excluded.cron, excluded.timezone, excluded.args, excluded.queue, excluded.priority,
                                 excluded.max_attempts, excluded.lease_ttl, excluded.timeout,
                                 excluded.backoff_base, excluded.catch_up, excluded.overlap)),
    since = CASE WHEN (cron, timezone) IS NOT (excluded.cron, excluded.timezone) THEN excluded.since ELSE since END,
    updated_at = CASE
        WHEN (cron, timezone, args, queue, priority, max_attempts, lease_ttl, timeout, backoff_base, catch_up, overlap)
             IS NOT (excluded.cron, excluded.timezone, excluded.args, excluded.queue, excluded.priority,
                     excluded.max_attempts, excluded.lease_ttl, excluded.timeout, excluded.backoff_base,
                     excluded.catch_up, excluded.overlap)
        THEN excluded.updated_at ELSE updated_at END,
    last_seen = excluded.last_seen,
    orphaned = 0
WHERE NOT dynamic

-- name: orphan_schedules
-- Every schedule the syncing app did not declare: shown orphaned, not deleted.
UPDATE tether_schedules SET orphaned = 1
WHERE NOT orphaned AND NOT dynamic AND name NOT IN (SELECT value FROM json_each(:names))

-- name: schedules_to_fire
-- Inside the fire's BEGIN IMMEDIATE: what the due ticks are computed from,
-- with the one clock expression (the machine's clock).
-- Code schedules by name, dynamic ones by the tasks this worker knows; not
-- the paused ones (see PostgreSQL's schedules_to_fire).
SELECT {now}, name, cron, timezone, catch_up, overlap, version, since, last_tick
FROM tether_schedules
WHERE NOT paused
  AND ((NOT dynamic AND name IN (SELECT value FROM json_each(:names)))
       OR (dynamic AND task IN (SELECT value FROM json_each(:tasks))))

-- name: decide_ticks
-- The decider: the due ticks ([tick, skip] pairs, oldest first) inserted
-- ON CONFLICT DO NOTHING, only while the definition is the version they were
-- computed from. Skipped (overlap=False) when the caller says so, or while
-- the schedule's last job is still queued or running (a rowid probe, not a
-- scan of its history). "ORDER BY" stands where SQLite needs a clause before
-- ON CONFLICT in an INSERT ... SELECT.
INSERT INTO tether_schedule_ticks (schedule, tick, skipped, decided_at)
SELECT s.name, t.value ->> 0,
       (t.value ->> 1) OR (NOT s.overlap AND EXISTS (
           SELECT 1 FROM tether_jobs AS j WHERE j.id = s.last_job_id AND j.state IN ('queued', 'running'))),
       {now}
FROM tether_schedules AS s, json_each(:ticks) AS t
WHERE s.name = :name AND s.version = :version
ORDER BY t.key
ON CONFLICT (schedule, tick) DO NOTHING
RETURNING tick, skipped

-- name: fire_job
-- The job for one tick this fire decided (or a trigger's), due at its tick,
-- with its task's tags: the member of :tags (a JSON object of each task's
-- tags, the firing worker's; store/schedules.py TaskTags) named by its task,
-- as JSON text (json_each gives an array member as its text); none: NULL.
INSERT INTO tether_jobs
    (queue, task, args, priority, run_at, max_attempts, lease_ttl, timeout, backoff_base, created_at,
     schedule, scheduled_for, tags)
SELECT queue, coalesce(task, name), args, priority, :tick, max_attempts, lease_ttl, timeout, backoff_base, {now},
       name, :tick, (SELECT t.value FROM json_each(:tags) AS t WHERE t.key = coalesce(task, name))
FROM tether_schedules
WHERE name = :name
RETURNING id, queue, task

-- name: mark_schedule
-- Bookkeeping, only ever forward. The transaction serialises fires, so the
-- caller's values are the newest unless a later tick was already recorded.
UPDATE tether_schedules
SET last_tick = CASE WHEN last_tick IS NULL OR :tick > last_tick THEN :tick ELSE last_tick END,
    last_job_id = CASE WHEN :fired IS NOT NULL AND (last_fired IS NULL OR :fired > last_fired)
                       THEN :job_id ELSE last_job_id END,
    last_fired = CASE WHEN :fired IS NOT NULL AND (last_fired IS NULL OR :fired > last_fired)
                      THEN :fired ELSE last_fired END,
    skipped = skipped + :skipped
WHERE name = :name

-- name: list_schedules
SELECT {now}, name, cron, timezone, args, queue, catch_up, overlap, since, last_tick, last_fired,
       last_job_id, skipped, orphaned, last_seen, coalesce(task, name), dynamic, paused, triggered, last_triggered
FROM tether_schedules
ORDER BY name

-- name: add_schedule
-- A dynamic schedule: a name already taken inserts nothing (no row back).
-- See PostgreSQL's add_schedule.
INSERT INTO tether_schedules
    (name, task, dynamic, cron, timezone, args, queue, priority, max_attempts, lease_ttl, timeout, backoff_base,
     catch_up, overlap, since, created_at, updated_at, last_seen)
VALUES (:name, :task, 1, :cron, :timezone, :args, :queue, :priority, :max_attempts, :lease_ttl, :timeout,
        :backoff_base, :catch_up, :overlap, {now}, {now}, {now}, {now})
ON CONFLICT (name) DO NOTHING
RETURNING name

-- name: set_schedule_paused
-- Pause or resume (see PostgreSQL's set_schedule_paused): SET expressions
-- see the row as it was, so paused below is the old state.
UPDATE tether_schedules
SET paused = :paused,
    version = version + (paused <> :paused),
    since = CASE WHEN paused AND NOT :paused THEN {now} ELSE since END,
    updated_at = CASE WHEN paused <> :paused THEN {now} ELSE updated_at END
WHERE name = :name
RETURNING dynamic

-- name: schedule_kind
-- Whether a schedule exists, and whether it is dynamic (remove's and
-- trigger's answer when they changed nothing), inside their transaction.
SELECT dynamic FROM tether_schedules WHERE name = :name

-- name: remove_schedule
DELETE FROM tether_schedules WHERE name = :name AND dynamic RETURNING name

-- name: trigger_tick
-- A manual tick (trigger_schedule) at now; the primary key still admits one.
INSERT INTO tether_schedule_ticks (schedule, tick, skipped, decided_at, manual)
SELECT name, {now}, 0, {now}, 1 FROM tether_schedules WHERE name = :name
ON CONFLICT (schedule, tick) DO NOTHING
RETURNING tick

-- name: mark_triggered
-- After trigger's job: counted, and last_fired / last_job_id forward only.
UPDATE tether_schedules
SET triggered = triggered + 1, last_triggered = :tick,
    last_job_id = CASE WHEN last_fired IS NULL OR :tick > last_fired THEN :job_id ELSE last_job_id END,
    last_fired = CASE WHEN last_fired IS NULL OR :tick > last_fired THEN :tick ELSE last_fired END
WHERE name = :name

-- name: prune_ticks
-- The pruner: up to :limit ticks decided more than :keep seconds ago (here a
-- fire reads and decides in one transaction, so a decided tick is never
-- proposed again at all; store/schedules.py). Each schedule's are found by a
-- range of the primary key (schedule, tick), driven by the schedules table (a
-- few rows): a tick is never later than its decision, so `tick < cutoff`
-- holds for every row wanted, and the range reads old rows only, plus the
-- few caught-up ticks decided recently, which decided_at keeps. No index on
-- decided_at: one more entry per tick for nothing the key does not give.
DELETE FROM tether_schedule_ticks
WHERE (schedule, tick) IN (
    SELECT t.schedule, t.tick
    FROM tether_schedules AS s
    JOIN tether_schedule_ticks AS t ON t.schedule = s.name AND t.tick < {now} - :keep
    WHERE t.decided_at < {now} - :keep
    LIMIT :limit)

-- ---------------------------------------------------------------------------
-- Job control (issue 20): retention.

-- name: prune
-- Retention (as on PostgreSQL): the oldest finished jobs past their state's
-- age, up to :limit, inside the caller's BEGIN IMMEDIATE (prune_attempts
-- follows). :ages is a JSON object {state: age in seconds} of the states
-- asked (finished ones: Store.prune checks them). Each state is read on its
-- own, by a correlated subquery (SQLite's LATERAL), because only an equality
-- on state plus `finished_at < cutoff` lets tether_jobs_finished_idx hand the
-- rows over in finish order and stop after :limit of them; the cutoff
-- implies the index's predicate (finished_at IS NOT NULL), which only
-- finished rows satisfy. The outer state check ({finished_states}: the
-- terminal states, model.STATE_FACTS) keeps a live row out whatever sets
-- finished_at one day.
DELETE FROM tether_jobs
WHERE state IN ({finished_states}) AND id IN (
    SELECT j.id
    FROM json_each(:ages) AS r
    JOIN tether_jobs AS j ON j.id IN (SELECT x.id FROM tether_jobs AS x
                                      WHERE x.state = r.key AND x.finished_at < {now} - r.value
                                        AND NOT {_unfinished_run}
                                      ORDER BY x.finished_at LIMIT :limit)
    ORDER BY j.finished_at
    LIMIT :limit
)
RETURNING id, state

-- name: prune_attempts
-- The pruned jobs' attempts rows, by the primary key's first column.
DELETE FROM tether_attempts WHERE job_id IN (SELECT value FROM json_each(:ids))

-- name: prune_steps
-- The pruned jobs' workflow rows (issue 42): their step, edges and counts.
DELETE FROM tether_workflow_steps WHERE job_id IN (SELECT value FROM json_each(:ids))

-- name: prune_edges
DELETE FROM tether_job_deps
WHERE job_id IN (SELECT value FROM json_each(:ids)) OR upstream_id IN (SELECT value FROM json_each(:ids))

-- name: prune_counts
DELETE FROM tether_job_waits WHERE job_id IN (SELECT value FROM json_each(:ids))

-- name: _unfinished_run
-- Whether the job x is a step of a workflow run with a step not yet ended
-- (issue 42: retention keeps such a run whole); one probe of the steps'
-- primary key for a job of no workflow.
-- A member of a batch not yet finished stays too.
(EXISTS (SELECT 1 FROM tether_workflow_steps AS s
         JOIN tether_workflow_steps AS o ON o.workflow_id = s.workflow_id
         JOIN tether_jobs AS oj ON oj.id = o.job_id
         WHERE s.job_id = x.id AND oj.state IN ('waiting', 'queued', 'running'))
 OR EXISTS (SELECT 1 FROM tether_job_deps AS bd
            JOIN tether_batches AS b ON b.id = (-bd.job_id) / 16
            WHERE bd.upstream_id = x.id AND bd.job_id < 0 AND b.finished_at IS NULL))

-- name: prunable
-- What prune would delete, by state asked: the same WHERE, counted.
SELECT r.key, (SELECT count(*) FROM tether_jobs AS x WHERE x.state = r.key AND x.finished_at < {now} - r.value
                AND NOT {_unfinished_run})
FROM json_each(:ages) AS r

-- ---------------------------------------------------------------------------
-- Job control (issue 20): pause and resume.

-- name: set_paused
INSERT INTO tether_queues (queue, paused, updated_at) VALUES (:queue, :paused, {now})
ON CONFLICT (queue) DO UPDATE SET paused = excluded.paused, updated_at = excluded.updated_at

-- name: paused_queues
SELECT queue FROM tether_queues WHERE paused ORDER BY queue

-- name: set_limits
-- A queue's limits, set whole (NULL: no such limit), beside its paused flag;
-- the claims read them from the next claim on.
INSERT INTO tether_queues (queue, paused, updated_at, concurrency, rate_limit, rate_period)
VALUES (:queue, 0, {now}, :concurrency, :rate_limit, :rate_period)
ON CONFLICT (queue) DO UPDATE SET concurrency = excluded.concurrency, rate_limit = excluded.rate_limit,
                                  rate_period = excluded.rate_period, updated_at = excluded.updated_at

-- name: queue_limits
-- Every queue with a limit, with what counts against it now: its running jobs
-- (a dead worker's among them until reaped) and its starts in the rate window.
SELECT q.queue, q.concurrency, q.rate_limit, q.rate_period,
       (SELECT count(*) FROM tether_jobs AS j WHERE j.state = 'running' AND j.queue = q.queue),
       (SELECT count(*) FROM tether_queue_starts AS s
        WHERE s.queue = q.queue AND s.started_at > {now} - q.rate_period)
FROM tether_queues AS q
WHERE q.concurrency IS NOT NULL OR q.rate_limit IS NOT NULL
ORDER BY q.queue

-- Finding and acting on many jobs (issue 43; store/many.py) -------------------

-- name: _job_filter
-- The filters of app.jobs() and of the bulk actions (search.JobFilter), ANDed;
-- a NULL parameter is a filter not given. meta, args and tags match by JSON
-- containment through tether_contains(doc, pattern) (search.contains_json,
-- registered on each connection: SQLite has no @>); no index serves those,
-- so they test the rows the other filters leave (migration 0011).
(:states IS NULL OR state IN (SELECT value FROM json_each(:states)))
AND (:ids IS NULL OR id IN (SELECT value FROM json_each(:ids)))
AND (:queue IS NULL OR queue = :queue)
AND (:task IS NULL OR task = :task)
AND (:tags IS NULL OR tether_contains(tags, :tags))
AND (:meta IS NULL OR tether_contains(meta, :meta))
AND (:args IS NULL OR tether_contains(args, :args))
AND (:created_after IS NULL OR created_at >= :created_after)
AND (:created_before IS NULL OR created_at < :created_before)
AND (:finished_after IS NULL OR finished_at >= :finished_after)
AND (:finished_before IS NULL OR finished_at < :finished_before)

-- name: search_jobs
-- A page of app.jobs(): newest first, keyset-paged on the id.
SELECT {job_select}
FROM tether_jobs
WHERE {_job_filter}
  AND (:before IS NULL OR id < :before)
ORDER BY id DESC
LIMIT :limit

-- name: count_jobs
SELECT count(*) FROM tether_jobs WHERE {_job_filter}

-- name: many_picked
-- The next :limit matching jobs above :after in one of :picked (a JSON array
-- of states), in id order, inside the bulk action's write transaction: a
-- running job is picked for a cancel only while not yet asked.
SELECT id FROM tether_jobs
WHERE {_job_filter}
  AND state IN (SELECT value FROM json_each(:picked))
  AND NOT (state = 'running' AND cancel_requested)
  AND id > :after
ORDER BY id
LIMIT :limit

-- name: cancel_many
-- cancel over the picked ids (:ids, a JSON array): an ending (ending.py).
-- Its own columns, task and queue, name the jobs it cancelled at once in
-- their job.cancelled events (many.py reads them only while a hook listens).
UPDATE tether_jobs
SET state = CASE WHEN state = 'queued' THEN 'cancelled' ELSE state END,
    finished_at = CASE WHEN state = 'queued' THEN {now} ELSE finished_at END,
    cancel_requested = (state = 'running')
WHERE id IN (SELECT value FROM json_each(:ids)) AND state IN ('queued', 'running')
RETURNING id, state, NULL, NULL, NULL, NULL, NULL, NULL, NULL, task, queue, {_dependents}

-- name: retry_many
-- retry over the picked ids. A job whose dedup key an active job holds
-- stays as it is, and of several with one key only the newest is retried.
UPDATE tether_jobs AS c
SET state = 'queued',
    run_at = {now},
    finished_at = NULL,
    cancel_requested = 0,
    max_attempts = max(max_attempts, attempt - released + 1)
WHERE id IN (SELECT value FROM json_each(:ids)) AND state IN ('dead', 'cancelled')
  AND (dedup_key IS NULL
       OR (NOT EXISTS (SELECT 1 FROM tether_jobs AS a
                       WHERE a.dedup_key = c.dedup_key AND a.state IN ('queued', 'running'))
           AND id = (SELECT max(b.id) FROM tether_jobs AS b
                     WHERE b.dedup_key = c.dedup_key AND b.state IN ('dead', 'cancelled'))))
RETURNING id, queue, {_dependents}

-- name: delete_many
-- The picked finished jobs (prune_attempts follows); never a live one.
DELETE FROM tether_jobs
WHERE id IN (SELECT value FROM json_each(:ids)) AND state IN ({finished_states})
RETURNING id

-- name: rerun
-- app.rerun(): a new job copied from a finished one, queued now, rerun_of
-- naming it. A dedup key an active job holds again inserts nothing.
INSERT INTO tether_jobs (run_at, created_at, queue, task, args, priority, max_attempts, lease_ttl, timeout,
                         dedup_key, meta, exclusive_key, tags, backoff_base, rerun_of)
SELECT {now}, {now}, queue, task, args, priority, max_attempts, lease_ttl, timeout,
       dedup_key, meta, exclusive_key, tags, backoff_base, id
FROM tether_jobs
WHERE id = :id AND state IN ('succeeded', 'dead', 'cancelled')
ON CONFLICT DO NOTHING
RETURNING id
-- name: _dependents
-- The last column of every ending's RETURNING (issue 42): whether the job has
-- dependents (workflow steps waiting for it), so that ending.end releases
-- them only for the jobs that have some: a probe of the job_deps primary key
-- per ended row, inside the ending statement, and no statement more for a
-- plain job.
EXISTS (SELECT 1 FROM tether_job_deps AS dd WHERE dd.upstream_id = tether_jobs.id)

-- name: dependents
-- The jobs that wait for an ended job, with their state and policy.
SELECT d.job_id, j.state, w.on_failure
FROM tether_job_deps AS d
JOIN tether_jobs AS j ON j.id = d.job_id
JOIN tether_job_waits AS w ON w.job_id = d.job_id
WHERE d.upstream_id = :id
ORDER BY d.job_id

-- name: dep_cut
-- An ending (ending.py) of a waiting step whose dependency ended dead or
-- cancelled under the policy on_failure='cancel': cancelled, naming the
-- upstream whose failure it was; it ran no attempt (outcome NULL). Its own
-- dependents are released in turn by end(), in the same transaction.
UPDATE tether_jobs
SET state = 'cancelled', finished_at = {now},
    last_error = 'upstream job ' || :root || ' ended ' || :why
WHERE id = :id AND state = 'waiting'
RETURNING id, state, NULL, NULL, NULL, NULL, NULL, NULL, NULL, {_dependents}

-- name: dep_mark
UPDATE tether_job_waits SET cancelled_by = :root WHERE job_id = :id

-- name: dep_count
-- One more dependency of a waiting job has ended (:bad: not in success). SQLite
-- has one writer at a time: the count read back is the job's own.
UPDATE tether_job_waits SET pending = pending - 1, failed = failed + :bad
WHERE job_id = :id
RETURNING pending, failed, on_failure

-- name: dep_free
-- Its queue: the job is announced on a delivering transport after the commit.
UPDATE tether_jobs SET state = 'queued', run_at = min(run_at, {now})
WHERE id = :id AND state = 'waiting'
RETURNING id, queue

-- name: workflow_counted
-- A step of a run ended (ending.py): the run counts one open step fewer; the
-- ending that takes it to zero finished it (finished_at, once).
UPDATE tether_workflows
SET open = open - 1, finished_at = CASE WHEN open - 1 <= 0 THEN {now} END
WHERE id = (SELECT workflow_id FROM tether_workflow_steps WHERE job_id = :id) AND finished_at IS NULL
RETURNING id, open

-- name: workflow_reopened
-- app.retry of a step: it, and the steps its ending cancelled, are open again.
UPDATE tether_workflows SET open = open + :n, finished_at = NULL
WHERE id = (SELECT workflow_id FROM tether_workflow_steps WHERE job_id = :id)

-- name: workflow_open
-- A run just inserted counts all its steps open.
UPDATE tether_workflows SET open = :n WHERE id = :id

-- name: dep_reopen
-- app.retry of a job with dependents (issue 42): the steps its failure
-- cancelled wait again; the run-policy steps that counted it, or one of
-- those, as ended and failed, and still wait, count it as pending again.
SELECT job_id FROM tether_job_waits WHERE cancelled_by = :id

-- name: dep_back
UPDATE tether_jobs SET state = 'waiting', finished_at = NULL, last_error = NULL
WHERE id IN (SELECT value FROM json_each(:ids)) AND state = 'cancelled'
RETURNING id

-- name: dep_recount
UPDATE tether_job_waits
SET pending = pending + g.n, failed = max(failed - g.n, 0), cancelled_by = NULL
FROM (SELECT d.job_id, count(*) AS n FROM tether_job_deps AS d
      WHERE d.upstream_id IN (SELECT value FROM json_each(:ups))
      GROUP BY d.job_id) AS g
WHERE tether_job_waits.job_id = g.job_id
  AND g.job_id NOT IN (SELECT value FROM json_each(:back))
  AND (SELECT state FROM tether_jobs WHERE id = g.job_id) = 'waiting'

-- name: dep_unmark
UPDATE tether_job_waits SET cancelled_by = NULL WHERE job_id IN (SELECT value FROM json_each(:back))

-- name: workflow_insert
INSERT INTO tether_workflows (name, created_at) VALUES (:name, {now}) RETURNING id

-- name: workflow_step
INSERT INTO tether_workflow_steps (job_id, workflow_id, name) VALUES (:job, :workflow, :name)

-- name: workflow_dep
INSERT INTO tether_job_deps (upstream_id, job_id) VALUES (:up, :down)

-- name: workflow_wait
-- A step with dependencies waits: moved to 'waiting' in the transaction that
-- inserted it, before anyone can see it, so no claim takes it early.
INSERT INTO tether_job_waits (job_id, pending, on_failure) VALUES (:job, :pending, :policy)

-- name: workflow_hold
UPDATE tether_jobs SET state = 'waiting' WHERE id = :job

-- name: workflow_get
SELECT id, name, created_at FROM tether_workflows WHERE id = :id

-- name: workflow_steps
SELECT s.name, s.job_id, j.state, coalesce(w.on_failure, 'cancel'),
       (SELECT json_group_array(u.name) FROM (
            SELECT u.name FROM tether_job_deps AS d
            JOIN tether_workflow_steps AS u ON u.job_id = d.upstream_id
            WHERE d.job_id = s.job_id ORDER BY u.job_id) AS u)
FROM tether_workflow_steps AS s
LEFT JOIN tether_jobs AS j ON j.id = s.job_id
LEFT JOIN tether_job_waits AS w ON w.job_id = s.job_id
WHERE s.workflow_id = :id
ORDER BY s.job_id

-- name: job_workflow
SELECT workflow_id FROM tether_workflow_steps WHERE job_id = :id

-- name: job_flow
-- A job's page (the dashboard): its workflow run and its batch edge (a member)
-- or batch (a callback), in one round trip of index probes: the step's key,
-- the edges' (upstream_id, job_id) key, the callbacks' partial indexes.
SELECT (SELECT workflow_id FROM tether_workflow_steps WHERE job_id = :id),
       (SELECT -job_id FROM tether_job_deps WHERE upstream_id = :id AND job_id < 0 LIMIT 1),
       COALESCE((SELECT id FROM tether_batches WHERE on_complete = :id LIMIT 1),
                (SELECT id FROM tether_batches WHERE on_success = :id LIMIT 1))

-- name: upstream_results
SELECT u.name, j.state, j.result
FROM tether_job_deps AS d
JOIN tether_workflow_steps AS u ON u.job_id = d.upstream_id
JOIN tether_jobs AS j ON j.id = d.upstream_id
WHERE d.job_id = :id
ORDER BY d.upstream_id

-- name: batch_edges
-- The batch edges of an ended job (issue 42): -(batch * 16 + shard).
SELECT -job_id FROM tether_job_deps WHERE upstream_id = :id AND job_id < 0

-- name: batch_count
UPDATE tether_batch_shards SET pending = pending - 1, failed = failed + :bad
WHERE batch_id = :batch AND shard = :shard
RETURNING pending

-- name: batch_zeroed
UPDATE tether_batches SET zeroed = zeroed + 1 WHERE id = :batch
RETURNING zeroed >= shards

-- name: batch_finish
UPDATE tether_batches SET finished_at = {now}
WHERE id = :batch AND finished_at IS NULL
RETURNING on_complete, on_success, (SELECT sum(failed) FROM tether_batch_shards WHERE batch_id = :batch)

-- name: batch_release
-- An ending (ending.py) when on_success is cancelled, which ran no attempt.
-- A batch's callbacks once its last member ended: on_complete queued;
-- on_success queued if every member succeeded (:bad = 0), else cancelled.
UPDATE tether_jobs
SET state = CASE WHEN id = :on_complete OR :bad = 0 THEN 'queued' ELSE 'cancelled' END,
    run_at = min(run_at, {now}),
    finished_at = CASE WHEN id = :on_complete OR :bad = 0 THEN NULL ELSE {now} END,
    last_error = CASE WHEN id = :on_complete OR :bad = 0 THEN NULL
                      ELSE 'batch ' || :batch || ': ' || :bad || ' member(s) did not succeed' END
WHERE id IN (:on_complete, :on_success) AND state = 'waiting'
RETURNING id, state, NULL, NULL, NULL, NULL, NULL, NULL, NULL, queue, {_dependents}

-- name: batch_insert
INSERT INTO tether_batches (created_at, shards) VALUES ({now}, :shards) RETURNING id

-- name: batch_shard
INSERT INTO tether_batch_shards (batch_id, shard, pending) VALUES (:batch, :shard, :pending)

-- name: batch_callbacks
UPDATE tether_batches SET on_complete = :on_complete, on_success = :on_success WHERE id = :batch

-- name: batch_of
SELECT -job_id FROM tether_job_deps WHERE upstream_id = :id AND job_id < 0

-- name: batch_grow
-- ctx.batch.add: the adding member's shard counts the new members first, and
-- only while it is not zero.
UPDATE tether_batch_shards SET pending = pending + :n
WHERE batch_id = :batch AND shard = :shard AND pending > 0
RETURNING pending

-- name: batch_members
-- ctx.batch.member_ids: a page of a batch's members, ascending from after
-- (keyset paging: a callback of a 10,000-member batch reads them a page at
-- a time). The edges' job_id index gives the batch's 16 edge values.
SELECT d.upstream_id FROM tether_job_deps AS d
WHERE d.job_id BETWEEN -(:id * 16 + 15) AND -(:id * 16) AND d.upstream_id > :after
ORDER BY d.upstream_id
LIMIT :limit

-- name: batch_get
SELECT id, created_at, on_complete, on_success, finished_at FROM tether_batches WHERE id = :id

-- name: batch_counts
SELECT j.state, count(*)
FROM tether_job_deps AS d JOIN tether_jobs AS j ON j.id = d.upstream_id
WHERE d.job_id BETWEEN -(:id * 16 + 15) AND -(:id * 16)
GROUP BY j.state

-- name: batch_reopen
-- app.retry of a batch member (dead or cancelled: counted as failed).
UPDATE tether_batch_shards SET pending = pending + 1, failed = max(failed - 1, 0)
WHERE batch_id = :batch AND shard = :shard
RETURNING pending

-- name: batch_unzero
UPDATE tether_batches SET zeroed = zeroed - 1 WHERE id = :batch AND finished_at IS NULL RETURNING id

-- name: batch_called
-- The batch whose callback a job is (a callback's ctx.batch).
SELECT id FROM tether_batches WHERE on_complete = :id
UNION ALL
SELECT id FROM tether_batches WHERE on_success = :id

-- name: key_limits_exist
-- Whether any limit-key pattern exists: tether_key_take asks once per claim
-- statement, and lets every key through without another query when none does.
SELECT EXISTS (SELECT 1 FROM tether_key_limits)

-- name: key_room
-- A key's limits and use, for tether_key_take (keys.py), run from inside the
-- claim statement on its own connection, so inside the claim's write
-- transaction: after any completions of the same round, and with no other
-- writer in between (SQLite's one writer): exact. The key's best pattern
-- (the most specific it matches), its running jobs and its starts in the
-- pattern's window; no row: no pattern matches, no limit.
SELECT l.concurrency, l.rate_limit,
       (SELECT count(*) FROM tether_jobs AS j WHERE j.limit_key = :key AND j.state = 'running'),
       (SELECT count(*) FROM tether_key_starts AS s
        WHERE s.limit_key = :key AND l.rate_period IS NOT NULL AND s.started_at > :now - l.rate_period)
FROM tether_key_limits AS l
WHERE :key GLOB l.matcher
ORDER BY l.rank DESC, l.pattern
LIMIT 1

-- name: set_key_limits
-- A limit-key pattern's limits, set whole (issue 44): upserted, or deleted
-- when both are NULL (a pattern without limits is no pattern). Two
-- statements in one write transaction (store/sqlite/control.py).
INSERT INTO tether_key_limits (pattern, matcher, rank, concurrency, rate_limit, rate_period, updated_at)
SELECT :pattern, :matcher, :rank, :concurrency, :rate_limit, :rate_period, {now}
WHERE :concurrency IS NOT NULL OR :rate_limit IS NOT NULL
ON CONFLICT (pattern) DO UPDATE SET concurrency = excluded.concurrency, rate_limit = excluded.rate_limit,
                                    rate_period = excluded.rate_period, updated_at = excluded.updated_at

-- name: drop_key_limits
DELETE FROM tether_key_limits WHERE pattern = :pattern AND :concurrency IS NULL AND :rate_limit IS NULL

-- name: key_limits
-- Every limit-key pattern, with what counts against it now, over the keys in
-- use (a job running, or a recorded start) that take their limits from it
-- (their best match): how many have a job running or a start in the window,
-- their running jobs, the most of any one key, their starts in the window.
WITH used AS (
    SELECT k.limit_key, (SELECT l.pattern FROM tether_key_limits AS l WHERE k.limit_key GLOB l.matcher
                         ORDER BY l.rank DESC, l.pattern LIMIT 1) AS pattern
    FROM (SELECT limit_key FROM tether_jobs WHERE state = 'running' AND limit_key IS NOT NULL
          UNION SELECT limit_key FROM tether_key_starts) AS k
), counted AS (
    SELECT u.pattern,
           (SELECT count(*) FROM tether_jobs AS j WHERE j.state = 'running' AND j.limit_key = u.limit_key) AS running,
           (SELECT count(*) FROM tether_key_starts AS s JOIN tether_key_limits AS l ON l.pattern = u.pattern
            WHERE s.limit_key = u.limit_key AND l.rate_period IS NOT NULL
              AND s.started_at > {now} - l.rate_period) AS started
    FROM used AS u WHERE u.pattern IS NOT NULL
)
SELECT l.pattern, l.concurrency, l.rate_limit, l.rate_period,
       count(c.pattern) FILTER (WHERE c.running > 0 OR c.started > 0),
       coalesce(sum(c.running), 0), coalesce(max(c.running), 0), coalesce(sum(c.started), 0)
FROM tether_key_limits AS l LEFT JOIN counted AS c ON c.pattern = l.pattern
GROUP BY l.pattern
ORDER BY l.pattern
