"""When the loop runs: the penalty backoff and the one planned APScheduler job.

No self-loop: every message of the target user cancels the planned run, adds
one to the penalty and plans a single run after
``min(base × multiplier^(penalty−1), cap)`` minutes (``date`` trigger in the
scheduler's timezone, pitfall P8). A successful cycle resets the penalty.
"""

from __future__ import annotations

import math
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from datetime import datetime, timedelta
from typing import Any

from nonebot import logger

from ..core.config import SubconsciousConfig
from ..storage.shared.leases import Leases

__all__ = ["CYCLE_LEASE_TTL", "RunPlanner", "compute_delay", "cycle_lease"]

CYCLE_LEASE_TTL = 120.0
"""Seconds an L3 cycle's lease lasts unrenewed (a killed process blocks the others this long)."""


@asynccontextmanager
async def cycle_lease(leases: Leases | None, target: str) -> AsyncIterator[bool]:
    """One L3 cycle per target across every process sharing the store: yields whether
    this process may run it (always without leases: the store is this process's own)."""
    if leases is None:
        yield True
        return
    async with leases.attempt(f"l3-cycle:{target}", ttl=CYCLE_LEASE_TTL) as held:
        yield held


def compute_delay(config: SubconsciousConfig, penalty: int) -> timedelta:
    """``min(base × multiplier^(penalty−1), cap)`` minutes (penalty below 1 counts as 1)."""
    base = config.rethink_base_delay_minutes
    cap = config.rethink_max_delay_minutes
    multiplier = config.rethink_penalty_multiplier
    exponent = max(penalty, 1) - 1
    if multiplier > 1 and exponent * math.log(multiplier) >= math.log(max(cap / base, 1.0)):
        minutes = cap
    else:
        minutes = min(base * multiplier**exponent, cap)
    return timedelta(minutes=minutes)


class RunPlanner:
    """Owns the penalty and the planned job of one target user."""

    def __init__(
        self,
        config: SubconsciousConfig,
        job_id: str,
        run: Callable[[], Awaitable[Any]],
        *,
        scheduler: Any | None = None,
    ) -> None:
        self.config = config
        self.job_id = job_id
        self.penalty = 0
        self._run = run
        self._scheduler = scheduler

    @property
    def scheduler(self) -> Any:
        if self._scheduler is None:
            from nonebot_plugin_apscheduler import scheduler

            self._scheduler = scheduler
        return self._scheduler

    @property
    def next_run_time(self) -> datetime | None:
        """When the planned cycle runs (timezone-aware), ``None`` when nothing is planned."""
        job = self.scheduler.get_job(self.job_id)
        return getattr(job, "next_run_time", None) if job is not None else None

    def cancel(self) -> None:
        if self.scheduler.get_job(self.job_id) is not None:
            self.scheduler.remove_job(self.job_id)

    def plan_after_message(self) -> timedelta:
        """The target spoke: cancel the planned run, add a penalty, plan one run."""
        self.penalty += 1
        delay = compute_delay(self.config, self.penalty)
        run_at = datetime.now(self.scheduler.timezone) + delay
        self.plan_at(run_at)
        logger.info(
            f"[Subconscious] Next run in {delay.total_seconds() / 60:.1f} min "
            f"(penalty={self.penalty}, at {run_at:%Y-%m-%d %H:%M:%S %Z})"
        )
        return delay

    def plan_at(self, run_at: datetime) -> None:
        """Plan the one run for ``run_at`` (a cap of ``[budget]``: the next day); the
        penalty stays."""
        self.cancel()
        self.scheduler.add_job(
            self._run_planned,
            "date",
            run_date=run_at,
            id=self.job_id,
            replace_existing=True,
            misfire_grace_time=600,
            coalesce=True,
        )

    async def _run_planned(self) -> None:
        try:
            await self._run()
        except Exception as exc:  # never let a cycle take the scheduler down
            logger.opt(exception=exc).error("[Subconscious] Planned run crashed")
