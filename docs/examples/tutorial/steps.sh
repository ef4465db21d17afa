#!/usr/bin/env bash
# The tutorial's commands, run as they stand by tests/test_docs_examples.py
# (from the source tree) and tests/test_wheel.py (from the built wheel), in a
# directory holding app.py, with tether on PATH. The sections between the
# markers are what docs/tutorial.md shows.
set -euo pipefail

# --8<-- [start:migrate]
tether migrate
# --8<-- [end:migrate]

# --8<-- [start:enqueue]
python -c 'import app; print(app.add.enqueue(a=2, b=3))'
# --8<-- [end:enqueue]

# --8<-- [start:burst]
tether worker --app app:app --burst
tether job 1
# --8<-- [end:burst]

# --8<-- [start:kill]
python -c 'import app; print(app.add.enqueue(a=20, b=22))'
tether worker --app app:app &     # a worker, in the background
worker=$!
until tether job 2 --json | grep -q '"state": "running"'; do sleep 0.2; done
kill -9 "$worker"                 # no goodbye: the job's lease is all that is left of it
wait "$worker" || true
tether job 2                      # still running, its owner gone
# --8<-- [end:kill]

# --8<-- [start:recover]
tether worker --app app:app --burst   # sees that its predecessor is dead, takes the job back, runs it
tether job 2                          # succeeded, on attempt 2
# --8<-- [end:recover]
