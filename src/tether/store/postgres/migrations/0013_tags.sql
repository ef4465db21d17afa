-- tether schema, version 13 (PostgreSQL): a job's tags, the job it reruns,
-- and the indexes that serve app.jobs()' meta and tags filters (issue 43).
--
-- tags is a JSON array of short strings (task-level tags merged with the
-- call's), NULL for a job without any; app.jobs(tags=[...]) matches
-- tags @> '[...]' (holds all). rerun_of is the job app.rerun() copied.
--
-- The GIN indexes are partial (WHERE ... IS NOT NULL): a plain enqueue, with
-- neither meta nor tags, adds no entry to them and pays only the predicate
-- test (issue 47: plain enqueue must not get slower). jsonb_path_ops: the
-- filters use only @> (containment), for which it is smaller and faster than
-- the default jsonb_ops. args is not indexed: every job has args, so a GIN
-- index on them would cost every insert; an args filter is meant to narrow
-- a task's jobs (task= first: jobs_claim_task_idx / the id order).
-- Plain ALTERs and CREATE INDEX inside the migration's transaction, as 0005.
ALTER TABLE {schema}.jobs ADD COLUMN tags jsonb, ADD COLUMN rerun_of bigint;
CREATE INDEX jobs_tags_idx ON {schema}.jobs USING gin (tags jsonb_path_ops) WHERE tags IS NOT NULL;
CREATE INDEX jobs_meta_idx ON {schema}.jobs USING gin (meta jsonb_path_ops) WHERE meta IS NOT NULL;
