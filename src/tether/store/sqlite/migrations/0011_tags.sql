-- tether schema, version 11 (SQLite): a job's tags and the job it reruns
-- (issue 43). tags is a JSON array of short strings, NULL for a job without
-- any; rerun_of is the job app.rerun() copied.
--
-- No index serves the meta, tags and args filters here: SQLite cannot index
-- JSON containment (app.jobs() tests it with tether_contains(), a function
-- each connection registers), so those filters scan the rows the other
-- filters leave, newest first, and stop at the page's limit.
ALTER TABLE tether_jobs ADD COLUMN tags TEXT;
ALTER TABLE tether_jobs ADD COLUMN rerun_of INTEGER;
