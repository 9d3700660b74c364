"""When the periodic archive sweep runs: shortly after start-up, then every interval.

A bot restarted more often than ``sweep_interval_minutes`` (6 h by default)
must still sweep by itself, so the first run comes
``[archive] first_sweep_delay_minutes`` after start-up. Checked on a real
``ambot run`` (remote ChromaDB, so this process watches the archive while the
bot holds it) and on a real APScheduler in this process; ``enabled = false``
schedules nothing.
"""

from __future__ import annotations

import asyncio
import dataclasses
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from tests.botproject import ALICE, BotProject, make_runtime, memory_meta, seed
from tests.console_bot import RunningBot
from tests.lazy import lazy_import
from tests.servers import ChromaServer, EmbeddingServer

C = lazy_import("amrita_plugin_memory.core.config")
E = lazy_import("amrita_plugin_memory.embedding", "amrita_plugin_memory.upkeep.rekey")
H = lazy_import("amrita_plugin_memory.adapters.archive_hooks")

MEM = "amrita_user_memory"
EXPIRED = [
    (f"old{i:03d}", f"很久以前的事 old{i}：爱丽丝喜欢第 {i} 号梨", memory_meta(ALICE))
    for i in range(12)
]


async def _until_swept(rt: Any, expected: int) -> None:
    """Wait until ``expected`` memories are in the archive and none is left live."""
    while (  # noqa: ASYNC110 - another process (or the scheduler) does the work
        await rt.store.archive.count_all() < expected or await rt.store.count_all() > 0
    ):
        await asyncio.sleep(0.1)


def _with_archive(rt: Any, **archive: Any) -> Any:
    file = rt.config.file.model_copy(update={"archive": C.ArchiveConfig(**archive)})
    rt.config = dataclasses.replace(rt.config, file=file)
    return rt


async def test_a_running_bot_sweeps_shortly_after_start_not_one_interval_later(
    tmp_path: Path, embed_server: EmbeddingServer, chroma_server: ChromaServer
) -> None:
    project = BotProject(tmp_path / "bot")
    project.write_remote_env(chroma_server, "first_sweep")
    config = project.root / "config" / "amrita_plugin_memory" / "config.toml"
    config.parent.mkdir(parents=True, exist_ok=True)
    # The interval is ~69 days: only the first, early sweep can archive anything.
    config.write_text(
        "[archive]\nfirst_sweep_delay_minutes = 0.01\nsweep_interval_minutes = 100000\n",
        encoding="utf-8",
    )
    rt = project.runtime()
    bot = RunningBot(project, l3=False)
    try:
        await seed(rt, MEM, EXPIRED)
        await E.reset_fingerprint(rt.maintenance)
        await E.migrate_partition_keys(rt.store)
        assert await rt.store.archive.count_all() == 0
        await asyncio.to_thread(bot.start)
        async with asyncio.timeout(120):  # hang guard only
            await _until_swept(rt, len(EXPIRED))
        assert await rt.store.archive.ids([i for i, _, _ in EXPIRED]) == {i for i, _, _ in EXPIRED}
        log = bot.log()
        assert "[Memory] 归档清理已计划：启动 0.01 分钟后首次执行，之后每 100000 分钟一次" in log
        assert "Traceback" not in log
    finally:
        await asyncio.to_thread(bot.stop)
        await rt.close()


async def test_first_sweep_on_a_real_scheduler_and_disabled_schedules_nothing(
    tmp_path: Path, embed_server: EmbeddingServer
) -> None:
    from apscheduler.schedulers.asyncio import AsyncIOScheduler

    scheduler = AsyncIOScheduler()
    scheduler.start()
    rt = make_runtime(tmp_path)
    try:
        await seed(rt, rt.store.name, EXPIRED)
        _with_archive(rt, enabled=False, first_sweep_delay_minutes=0)
        assert H.setup_archive(rt, scheduler) is None
        assert scheduler.get_jobs() == []

        _with_archive(rt, first_sweep_delay_minutes=0, sweep_interval_minutes=100000)
        sweeper = H.ArchiveSweeper(rt, scheduler)
        sweeper.start()  # what the driver's start-up hook does
        job = scheduler.get_job(H.JOB_ID)
        assert job is not None
        assert job.trigger.interval.total_seconds() == 100000 * 60
        async with asyncio.timeout(60):  # hang guard only
            await _until_swept(rt, len(EXPIRED))
        sweeper.stop()
        assert scheduler.get_job(H.JOB_ID) is None
    finally:
        scheduler.shutdown(wait=False)
        await rt.close()


def test_the_session_bot_never_sweeps_in_the_middle_of_other_tests() -> None:
    """conftest gives the session's bot a first sweep ~69 days away (its job still exists)."""
    from nonebot_plugin_apscheduler import scheduler

    from tests.helpers import runtime

    assert runtime().config.file.archive.first_sweep_delay_minutes == 100000
    job = scheduler.get_job(H.JOB_ID)
    assert job is not None
    assert job.next_run_time > datetime.now(UTC) + timedelta(days=60)


@pytest.mark.parametrize("value", [-1, "soon", 100_001])
def test_first_sweep_delay_is_validated(tmp_path: Path, value: Any) -> None:
    path = tmp_path / "config.toml"
    literal = f'"{value}"' if isinstance(value, str) else str(value)
    path.write_text(f"[archive]\nfirst_sweep_delay_minutes = {literal}\n", encoding="utf-8")
    with pytest.raises(C.ConfigError, match=r"archive\.first_sweep_delay_minutes"):
        C.load_config_file(path, warn=lambda _: None)
