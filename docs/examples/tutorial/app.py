# --8<-- [start:app]
import time

from tether import JobContext, Tether

app = Tether()  # $TETHER_DATABASE_URL, else sqlite:///tether.db


@app.task(max_attempts=3)
def add(ctx: JobContext, a: int, b: int) -> int:
    for step in range(10):
        # recorded on the job; also renews the worker's lease on it
        ctx.progress(step / 10, f"step {step}/10")
        time.sleep(0.5)
    return a + b
# --8<-- [end:app]
