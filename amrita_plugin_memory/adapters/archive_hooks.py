"""The periodic archive sweep inside a running bot (APScheduler job, ``[archive]``).

Thin glue: the sweep itself is :func:`..storage.sweep.sweep` (plain logic,
tested without a bot). One sweep at a time; a failed sweep (Chroma down,
maintenance running) is logged and retried at the next interval: it never
loses a memory (see :mod:`..storage.sweep`).
"""

from __future__ import annotations

import asyncio
from typing import Any

from nonebot import logger

from ..core.errors import VectorStoreError
from ..services import MemoryRuntime
from ..storage.sweep import SweepResult, sweep

__all__ = ["JOB_ID", "ArchiveSweeper", "setup_archive"]

JOB_ID = "amrita_plugin_memory_archive_sweep"


class ArchiveSweeper:
    """Runs :func:`~..storage.sweep.sweep` every ``sweep_interval_minutes``."""

    def __init__(self, runtime: MemoryRuntime, scheduler: Any | None = None) -> None:
        self.runtime = runtime
        self._scheduler = scheduler
        self._busy = asyncio.Lock()

    @property
    def scheduler(self) -> Any:
        if self._scheduler is None:
            from nonebot_plugin_apscheduler import scheduler

            self._scheduler = scheduler
        return self._scheduler

    async def run_once(self) -> SweepResult | None:
        """One sweep now; ``None`` if one is already running or it failed (logged)."""
        if self._busy.locked():
            return None
        config = self.runtime.config.file
        async with self._busy:
            try:
                return await sweep(
                    self.runtime.store, config.lifetime_days, batch_size=config.archive.batch_size
                )
            except VectorStoreError as exc:
                logger.warning(f"[Memory] 归档清理未完成，下次继续（没有记忆丢失）：{exc}")
                return None

    def start(self) -> None:
        """Schedule the job; the first sweep runs one interval after start-up.

        Lifetimes are days to months, so nothing is urgent at start-up, and a
        sweep never runs in the middle of a start (or of a short test session
        whose memories carry clocks set in the past).
        """
        self.scheduler.add_job(
            self.run_once,
            "interval",
            minutes=self.runtime.config.file.archive.sweep_interval_minutes,
            id=JOB_ID,
            replace_existing=True,
            coalesce=True,
            max_instances=1,
            misfire_grace_time=600,
        )

    def stop(self) -> None:
        try:
            if self.scheduler.get_job(JOB_ID) is not None:
                self.scheduler.remove_job(JOB_ID)
        except Exception as exc:  # the scheduler may already be gone at shutdown
            logger.debug(f"[Memory] 移除归档清理任务：{exc.__class__.__name__}")


def setup_archive(runtime: MemoryRuntime) -> ArchiveSweeper | None:
    """Schedule the sweep when ``[archive] enabled``; ``None`` (nothing scheduled) otherwise."""
    if not runtime.config.file.archive.enabled:
        return None
    from nonebot import get_driver

    sweeper = ArchiveSweeper(runtime)
    driver = get_driver()
    driver.on_startup(sweeper.start)
    driver.on_shutdown(sweeper.stop)
    return sweeper
