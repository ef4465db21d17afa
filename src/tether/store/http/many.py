"""Finding and acting on many jobs through a tether server (issue 43;
store/many.py): a mixin of ``HttpStore``, one request per call (a bulk
action's batch is one request: its statement runs on the server)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from ...model import Job
from ...search import JobFilter
from ..many import Batch, Ended
from . import wire

__all__ = ["HttpMany"]


class HttpMany:
    """``ManyJobs`` for ``HttpStore`` (which provides ``_call``)."""

    def _call(self, name: str, body: dict[str, Any] | None = None, *, path: dict[str, Any] | None = None,
              query: dict[str, Any] | None = None, timeout: float | None = None,
              now: datetime | None = None) -> dict[str, Any]:
        raise NotImplementedError

    def search_jobs(self, f: JobFilter, *, limit: int, before_id: int | None = None) -> list[Job]:
        found = self._call("search_jobs", {"filter": f.to_wire(), "limit": limit, "before": before_id})
        return [wire.decode_job(j) for j in found["jobs"]]

    def count_jobs(self, f: JobFilter) -> int:
        return int(self._call("count_jobs", {"filter": f.to_wire()})["count"])

    def cancel_batch(self, f: JobFilter, *, after_id: int, limit: int, now: datetime | None = None,
                     ended: list[Ended] | None = None) -> Batch:
        body: dict[str, Any] = {"filter": f.to_wire(), "after": after_id, "limit": limit}
        if ended is not None:  # only then: a server older than `ended` refuses the field
            body["ended"] = True
        got = self._call("cancel_many", body, now=now)
        if ended is not None:
            ended.extend((int(j["id"]), str(j["task"]), str(j["queue"])) for j in got.get("ended", ()))
        return int(got["count"]), got["last"]

    def retry_batch(
        self, f: JobFilter, *, after_id: int, limit: int, now: datetime | None = None
    ) -> tuple[list[tuple[int, str]], int | None]:
        got = self._call("retry_many", {"filter": f.to_wire(), "after": after_id, "limit": limit}, now=now)
        return [(int(j["id"]), str(j["queue"])) for j in got["jobs"]], got["last"]

    def delete_batch(self, f: JobFilter, *, after_id: int, limit: int) -> Batch:
        got = self._call("delete_many", {"filter": f.to_wire(), "after": after_id, "limit": limit})
        return int(got["count"]), got["last"]

    def rerun(self, job_id: int, *, now: datetime | None = None) -> int:
        return int(self._call("rerun", {}, path={"job_id": job_id}, now=now)["id"])
