# The command-line half of docs/how-to/many-jobs.md, run by
# tests/test_docs_many.py after example.py, on the same database
# (TETHER_DATABASE_URL).
set -eu
# --8<-- [start:cli]
tether jobs --state cancelled --meta customer=42 --tag eu --limit 2   # prints "next page: --after ..."
tether jobs --task billing.sync_invoice --json --all | wc -l           # one JSON object a line, every page
tether retry --state cancelled --meta customer=42 --dry-run            # would retry 3 job(s)
tether retry --state cancelled --meta customer=42 --yes
tether purge default --yes                                             # cancel every queued job of a queue
tether delete --state cancelled --yes                                  # finished jobs only
tether rerun 1
# --8<-- [end:cli]
