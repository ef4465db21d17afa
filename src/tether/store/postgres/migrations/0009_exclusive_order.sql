-- tether schema, version 9 (PostgreSQL): a key's queued jobs indexed in claim
-- order. {schema} is a validated, quoted identifier filled in at load time.
--
-- A claim takes a job with an exclusive key only if it is the first queued,
-- due job of its key (queries.sql, _key_free), as SQLite's claims always
-- have. Before, every queued job of a free key passed, so a claim's walk
-- filled its LIMIT with the first few keys' bursts and kept one job of each:
-- a claim of 10 over keys with 5 jobs queued each took 2. With this index,
-- finding a key's first job is one seek. Only rows with a key are in it:
-- jobs without one pay nothing. It only adds: workers of the previous release
-- never name it and run on as before.
CREATE INDEX jobs_exclusive_queued_idx ON {schema}.jobs (exclusive_key, priority DESC, run_at, id)
    WHERE state = 'queued' AND exclusive_key IS NOT NULL;
