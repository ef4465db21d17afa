-- tether schema, version 10 (PostgreSQL): one place where jobs end (issue 48).
-- {schema} is a validated, quoted identifier filled in at load time.
--
-- Every statement that ends a job now goes through queries.sql's _ending,
-- which writes the attempt's audit row and wakes the jobs' waiters in the
-- ending statement itself. The trigger of versions 5 and 8 woke waiters from
-- the attempts rows instead, which left out the endings that write none (a
-- cancelled queued job, a success, a buried job of an unknown task): those
-- statements each sent their own, or, for the buried one, nothing. Dropped,
-- so that an ending is announced once, by _ending. (A worker of an older
-- release still running on this schema announces its successes and cancels
-- itself as before; its failures and reaps are then seen by waiters at their
-- next read, at most PUSH_CHECK seconds later: store/waiting.py.)
DROP TRIGGER attempts_notify_finished ON {schema}.attempts;
DROP FUNCTION {schema}.notify_finished();
