-- tether schema, version 10 (SQLite): RESERVED for another branch's
-- migration (branch meta was given 0011). Migrations are numbered without
-- gaps, so this placeholder lets 0011 apply on this branch alone; drop it
-- when the branch that owns 0010 is merged.
SELECT 1;
