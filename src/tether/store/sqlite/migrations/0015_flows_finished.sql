-- tether schema, version 15 (SQLite): an ending says what it finished and
-- released (issue 42: the events workflow.finished and batch.finished, and
-- the steps and callbacks it queued published on a delivering transport), as
-- PostgreSQL's migration 0017.
--
-- A workflow run counts its steps not yet ended (open); the ending that takes
-- it to zero sets finished_at (ending.py; SQLite has one writer at a time).
ALTER TABLE tether_workflows ADD COLUMN open INTEGER NOT NULL DEFAULT 0;
ALTER TABLE tether_workflows ADD COLUMN finished_at REAL;
UPDATE tether_workflows
SET open = (SELECT count(*) FROM tether_workflow_steps AS s JOIN tether_jobs AS j ON j.id = s.job_id
            WHERE s.workflow_id = tether_workflows.id AND j.state IN ('waiting', 'queued', 'running'));
UPDATE tether_workflows SET finished_at = (julianday('now') - 2440587.5) * 86400.0 WHERE open = 0;

-- Every step gets an edge to job 0 (no job), so that the dependents flag of
-- an ending (queries.sql, _dependents) is true for a step nothing waits for
-- too: its ending must count on its run.
INSERT OR IGNORE INTO tether_job_deps (upstream_id, job_id) SELECT job_id, 0 FROM tether_workflow_steps;
