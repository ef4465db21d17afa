-- tether schema, version 12 (PostgreSQL): RESERVED for another branch's
-- migration (branch meta was given 0013). Migrations are numbered without
-- gaps, so this placeholder lets 0013 apply on this branch alone; drop it
-- when the branch that owns 0012 is merged.
SELECT 1;
