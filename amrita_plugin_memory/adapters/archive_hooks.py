"""The periodic archive sweep inside a running bot (APScheduler job, ``[archive]``).

Thin glue: the sweep itself is :func:`..upkeep.archive.sweep.sweep` (plain logic,
tested without a bot). The first run comes ``first_sweep_delay_minutes``
after start-up, then one every ``sweep_interval_minutes``. One sweep at a
time; a failed sweep (Chroma down, maintenance running) is logged and
retried at the next interval: it never loses a memory (see
:mod:`..upkeep.archive.sweep`).
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

from nonebot import logger

from ..core.errors import VectorStoreError
from ..services import MemoryRuntime
from ..upkeep.archive.sweep import SweepBusy, SweepResult, sweep

__all__ = ["JOB_ID", "ArchiveSweeper", "setup_archive"]

JOB_ID = "amrita_plugin_memory_archive_sweep"


class ArchiveSweeper:
    """Runs :func:`~..upkeep.archive.sweep.sweep` every ``sweep_interval_minutes``."""

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
                    self.runtime.store,
                    config.lifetime_days,
                    batch_size=config.archive.batch_size,
                    episodes=self.runtime.episodes,
                )
            except SweepBusy as exc:
                logger.info(f"[Memory] {exc}")
                return None
            except VectorStoreError as exc:
                logger.warning(f"[Memory] 归档清理未完成，下次继续（没有记忆丢失）：{exc}")
                return None

    def start(self) -> None:
        """Schedule the job: first sweep ``first_sweep_delay_minutes`` after start-up, then every interval.

        Not at once (start-up work is not slowed by a sweep), and not one whole
        interval later either: a bot restarted more often than the interval
        (6 h by default) would otherwise never sweep by itself.
        """
        archive = self.runtime.config.file.archive
        first = datetime.now(UTC) + timedelta(minutes=archive.first_sweep_delay_minutes)
        self.scheduler.add_job(
            self.run_once,
            "interval",
            minutes=archive.sweep_interval_minutes,
            next_run_time=first,
            id=JOB_ID,
            replace_existing=True,
            coalesce=True,
            max_instances=1,
            misfire_grace_time=600,
        )
        logger.info(
            f"[Memory] 归档清理已计划：启动 {archive.first_sweep_delay_minutes:g} 分钟后首次执行，"
            f"之后每 {archive.sweep_interval_minutes:g} 分钟一次"
        )

    def stop(self) -> None:
        try:
            if self.scheduler.get_job(JOB_ID) is not None:
                self.scheduler.remove_job(JOB_ID)
        except Exception as exc:  # the scheduler may already be gone at shutdown
            logger.debug(f"[Memory] 移除归档清理任务：{exc.__class__.__name__}")


def setup_archive(runtime: MemoryRuntime, scheduler: Any | None = None) -> ArchiveSweeper | None:
    """Schedule the sweep when ``[archive] enabled``; ``None`` (nothing scheduled) otherwise.

    ``scheduler`` defaults to nonebot_plugin_apscheduler's (tests pass their own).
    """
    if not runtime.config.file.archive.enabled:
        logger.info("[Memory] 归档清理已关闭（[archive] enabled = false），不会定期归档")
        return None
    from nonebot import get_driver

    sweeper = ArchiveSweeper(runtime, scheduler)
    driver = get_driver()
    driver.on_startup(sweeper.start)
    driver.on_shutdown(sweeper.stop)
    return sweeper
