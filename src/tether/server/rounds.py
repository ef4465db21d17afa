"""A worker's rounds on the server: claims (which may long-poll), completions,
heartbeats, progress, failures and releases.

A worker's round is awaited on the server's event loop (``Store.claim_async``
and the rest): PostgreSQL sends its statement from the loop itself, with no
hop to a thread and back, which took about half a round's time on the server.
The store's own fenced operations do the work, so a stale report is refused
exactly as it is for a local worker (409 ``stale_attempt``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from starlette.requests import Request

from ..config import validate_queue
from ..model import ClaimedJob, Outcome
from ..payload import dump_json
from ..store.http import wire
from .context import Args, Server

__all__ = ["LONG_POLLS", "LONG_POLL_TICK", "ROUNDS", "ROUND_FIRST", "ROWS", "WORKER_REPORTS", "long_poll"]

#: while a claim long-polls, how often it looks again without a wake-up
LONG_POLL_TICK = 0.2
#: a claiming request's argument: whether its answer carries the jobs as rows (``wire.ROWS_HEADER``)
ROWS = "answer_rows"

First = Callable[[Server, Args], Awaitable[tuple[Args, list[ClaimedJob]]]]


async def _claim_once(s: Server, a: Args) -> list[ClaimedJob]:
    queues = [validate_queue(q) for q in a["queues"]]
    return await s.store.claim_async(a["worker"], queues, a["limit"], a["lease_ttl"], now=a["now"],
                                     tasks=a.get("tasks"))


async def _claim_first(s: Server, a: Args) -> tuple[Args, list[ClaimedJob]]:
    return {}, await _claim_once(s, a)


async def _complete_and_claim_first(s: Server, a: Args) -> tuple[Args, list[ClaimedJob]]:
    # Every argument is checked before the store writes anything: a bad result
    # or queue refuses the whole request, completions included.
    rows, queues = _done_rows(s, a), [validate_queue(q) for q in a["queues"]]
    accepted, jobs = await s.store.complete_and_claim_async(a["worker"], rows, queues, a["limit"], a["lease_ttl"],
                                                            now=a["now"], tasks=a.get("tasks"))
    return {"accepted": sorted(accepted)}, jobs


async def _claim_ids(s: Server, a: Args) -> Args:
    queues = [validate_queue(q) for q in a["queues"]]
    jobs = await s.store.claim_ids_async(a["worker"], a["ids"], queues, a["lease_ttl"], now=a["now"],
                                         tasks=a.get("tasks"))
    return _claimed(a, jobs)


def _claimed(a: Args, jobs: list[ClaimedJob]) -> Args:
    """A claim's jobs, as the request asked (``wire.ROWS_HEADER``: rows) or as records."""
    return wire.encode_claimed_rows(jobs) if a.get(ROWS) else {"jobs": wire.encode_claimed_all(jobs)}


def _done_rows(s: Server, a: Args) -> list[tuple[int, int, str | None]]:
    return [(r["id"], r["attempt"], dump_json(r["result"], "result", s.max_payload) if "result" in r else None)
            for r in a["done"]]


async def _complete(s: Server, a: Args) -> Args:
    return {"accepted": sorted(await s.store.complete_async(a["worker"], _done_rows(s, a), now=a["now"]))}


def _fail(s: Server, a: Args) -> Args:
    state = s.store.fail(a["worker"], a["job_id"], a["attempt"], outcome=Outcome(a["outcome"]), error=a["error"],
                         traceback=a.get("traceback"), retry=a.get("retry", True), now=a["now"],
                         delay=a.get("delay"))
    return {"state": str(state)}


async def long_poll(s: Server, request: Request, args: Args, first: First) -> Args:
    """``first`` (a claim, or completions and a claim), then, with ``wait``,
    claims alone until jobs are due or the wait ends: whatever ``first`` wrote
    is written once, and its answer waits for the jobs."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + float(args.get("wait", 0.0))
    answer, jobs = await first(s, args)
    while not jobs and args["now"] is None:
        left = deadline - loop.time()
        if left <= 0 or await request.is_disconnected():
            break
        await s.wakeups.wait(min(LONG_POLL_TICK, left))
        jobs = await _claim_once(s, args)
    return {**answer, **_claimed(args, jobs)}


#: a worker's reports on the jobs it holds, run in a thread like every plain operation
WORKER_REPORTS: dict[str, Callable[[Server, Args], Args]] = {
    "heartbeat": lambda s, a: {"beats": [
        {"id": i, "beat": str(b)} for i, b in sorted(s.store.heartbeat(
            a["worker"], [(h["id"], h["attempt"]) for h in a["held"]], a["lease_ttl"], now=a["now"]).items())]},
    "progress": lambda s, a: {"cancel_requested": s.store.progress(
        a["worker"], a["job_id"], a["attempt"], a["fraction"], a["message"], a["lease_ttl"], now=a["now"])},
    "fail": _fail,
    "release": lambda s, a: {"state": str(s.store.release(a["worker"], a["job_id"], a["attempt"], now=a["now"]))},
}
#: a worker's round but for its claims: awaited on the event loop
ROUNDS: dict[str, Callable[[Server, Args], Awaitable[Args]]] = {
    "claim_ids": _claim_ids,
    "complete": _complete,
}
#: operations that end in a claim, which may long-poll (``long_poll``): their
#: first step, which returns the rest of the answer and the jobs claimed
LONG_POLLS: dict[str, First] = {
    "claim": _claim_first,
    "complete_and_claim": _complete_and_claim_first,
}
#: the routes tried first (see create_app)
ROUND_FIRST = frozenset({"complete_and_claim", "claim", "complete", "heartbeat", "claim_ids"})
