"""The app of the how-to "Remote workers" (docs/examples/guides/remote.sh
runs it through a real `tether server`): a worker and a producer that hold
no database credentials, only a server URL and a token."""

from tether import JobContext, Tether

# --8<-- [start:app]
app = Tether()  # TETHER_DATABASE_URL=http://queue-host:8000 and TETHER_TOKEN, or:
# app = Tether("http://queue-host:8000", token=PRODUCER_TOKEN)


@app.task
def resize(ctx: JobContext, path: str) -> str:
    return f"resized {path}"
# --8<-- [end:app]
