"""The PostgreSQL store's claims of delivered ids (``claim_ids``,
``complete_and_claim_ids``): a delivering transport's rounds, kept here so
that the store's own module stays within its size; the statements are
``steps.py``'s, run by the store's ``_drive`` and ``_drive_async``."""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import Executor
from datetime import datetime
from typing import TypeVar

from ...model import ClaimedJob
from .steps import Steps, claim_ids_steps, complete_and_claim_ids_steps

__all__ = ["ClaimIdsMixin"]

T = TypeVar("T")


class ClaimIdsMixin:
    """For ``PostgresStore``, which supplies the two drivers below."""

    def _drive(self, steps: Steps[T]) -> T:
        raise NotImplementedError

    async def _drive_async(self, steps: Steps[T]) -> T:
        raise NotImplementedError

    def claim_ids(
        self, worker: str, ids: Sequence[int], queues: Sequence[str], lease_ttl: float, *,
        now: datetime | None = None, tasks: Sequence[str] | None = None,
    ) -> list[ClaimedJob]:
        return self._drive(claim_ids_steps(worker, ids, queues, lease_ttl, now, tasks))

    async def claim_ids_async(
        self, worker: str, ids: Sequence[int], queues: Sequence[str], lease_ttl: float, *,
        executor: Executor | None = None, now: datetime | None = None, tasks: Sequence[str] | None = None,
    ) -> list[ClaimedJob]:
        return await self._drive_async(claim_ids_steps(worker, ids, queues, lease_ttl, now, tasks))

    def complete_and_claim_ids(
        self, worker: str, done: Sequence[tuple[int, int, str | None]], ids: Sequence[int], queues: Sequence[str],
        lease_ttl: float, *, now: datetime | None = None, tasks: Sequence[str] | None = None,
    ) -> tuple[set[int], list[ClaimedJob]]:
        return self._drive(complete_and_claim_ids_steps(worker, done, ids, queues, lease_ttl, now, tasks))

    async def complete_and_claim_ids_async(
        self, worker: str, done: Sequence[tuple[int, int, str | None]], ids: Sequence[int], queues: Sequence[str],
        lease_ttl: float, *, executor: Executor | None = None, now: datetime | None = None,
        tasks: Sequence[str] | None = None,
    ) -> tuple[set[int], list[ClaimedJob]]:
        return await self._drive_async(complete_and_claim_ids_steps(worker, done, ids, queues, lease_ttl, now, tasks))
