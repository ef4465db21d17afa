-- tether schema, version 6 (PostgreSQL): workers say which tasks they know,
-- and claims find queued jobs by (queue, task).
-- {schema} is a validated, quoted identifier filled in at load time.
--
-- workers.tasks: the task names a worker has handlers for (a JSON array,
-- written at register). It lets any process judge which queued jobs no live
-- worker can run (Stats.unknown, `tether status`) and lets the unknown-task
-- service bury a name no worker has known for its grace period. NULL for a
-- worker registered by an older tether: it claims any task, so it counts as
-- knowing every task (nothing is judged unknown, nothing buried, while it lives).
ALTER TABLE {schema}.workers ADD COLUMN tasks jsonb;

-- A worker claims only the tasks it knows (queries.sql, _claim_picked_known),
-- one (queue, task) pair at a time: with task in the key right after queue,
-- an equality on both hands rows over already in claim order, so a claim
-- reads only its own tasks' rows, never past a backlog of jobs of a task it
-- does not know (another app's on a shared queue, a new task in a rolling
-- deploy). jobs_claim_idx stays: the unfiltered claim and due_unclaimed walk
-- a queue in order across tasks. The cost is one more index entry per job
-- enqueued or requeued (queued rows only: the predicate keeps history out).
-- The predicate is spelled coalesce(state, '') = 'queued' (state is NOT NULL:
-- the same rows), and so is the claim's WHERE, for the planner's sake: a
-- claim that said state = 'queued' could also use jobs_claim_idx, whose
-- (queue, ...) prefix serves queue = $1 with the task as a filter, and with
-- no statistics on the table (a fresh schema, before autovacuum's ANALYZE)
-- PostgreSQL chose just that; claims run with generic plans, made once per
-- connection, so that plan would have stayed: 20,000 unknown jobs ahead made
-- each claim of 50 read all 20,000 (4 ms instead of 1). jobs_claim_idx's
-- predicate does not follow from the coalesce spelling, so this index is the
-- only one a claim naming tasks can use, and no other query matches it.
CREATE INDEX jobs_claim_task_idx ON {schema}.jobs (queue, task, priority DESC, run_at, id)
    WHERE coalesce(state, '') = 'queued';
