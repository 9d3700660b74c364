"""Backups, re-embedding and restores run inside the bot, one at a time.

While the bot runs in local mode no other process may open the embedded
ChromaDB, so the console (and ``ambot memory`` through it) asks the bot to
do the work. A re-embedding or a restore is a background job: the request
returns at once, progress goes to the WebUI's WebSocket channel (``publish``)
and to :meth:`MaintenanceJobs.current` (polled by the command line). Only one
maintenance operation runs at a time; a second one is refused with 409.

During a re-embedding or a restore the memory store's write gate is closed
(:class:`~..infra.gate.WriteGate`): a memory written meanwhile would land in
the collection that is about to be replaced, so writes fail at once with a
clear message instead. Knowledge entries live in files first; the knowledge
base is re-validated after the swap, so an entry the loop wrote meanwhile is
re-embedded into the new collection.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from typing import Any

from nonebot import logger

from ..embedding import (
    Maintenance,
    RemapReport,
    create_backup,
    list_backups,
    load_backup,
    remap,
    restore_backup,
)
from ..embedding.report_json import backup_json
from ..storage.memory_store import MemoryStore
from ..subconscious.knowledge_base import KnowledgeBaseManager, check_knowledge_base
from .catalog import PartitionCatalog
from .errors import audit, conflict, guarded, not_found

__all__ = ["JobState", "MaintenanceJobs"]

Publish = Callable[[dict[str, Any]], Awaitable[None]]

PUBLISH_INTERVAL = 0.25
"""Seconds between two progress messages (the last one is always sent)."""

_LABELS = {"reindex": "重映射", "restore": "恢复备份", "backup": "备份"}


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


@dataclass(slots=True)
class JobState:
    """One maintenance job as the page and the command line see it."""

    id: str
    kind: str
    actor: str
    state: str = "running"  # running | done | failed
    done: int = 0
    total: int = 0
    message: str = ""
    started_at: str = field(default_factory=_now)
    finished_at: str | None = None
    result: dict[str, Any] | None = None

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "label": _LABELS.get(self.kind, self.kind)}


class MaintenanceJobs:
    """The one maintenance slot of the bot."""

    def __init__(
        self,
        maint: Maintenance,
        catalog: PartitionCatalog,
        *,
        knowledge: KnowledgeBaseManager | None = None,
        publish: Publish | None = None,
    ) -> None:
        self.maint = maint
        self.catalog = catalog
        self.knowledge = knowledge
        self.publish = publish
        self.job: JobState | None = None
        """The running job, or the last one."""
        self._active: str | None = None
        """The kind of the operation in progress; set and cleared without awaiting in between
        the check, so two requests can never both start one."""
        self._tasks: set[asyncio.Task[Any]] = set()
        self._last_publish = 0.0

    @property
    def store(self) -> MemoryStore:
        return self.maint.store

    @property
    def busy(self) -> bool:
        return self._active is not None

    def current(self) -> dict[str, Any] | None:
        return self.job.to_json() if self.job is not None else None

    def _refuse_if_busy(self) -> None:
        if self.busy:
            running = _LABELS.get(self._active or "", "维护")
            conflict(f"已有维护操作正在进行（{running}），请等它结束后再试")

    # -- publishing -----------------------------------------------------------------

    def _spawn(self, coro: Awaitable[Any]) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _send(self, message: dict[str, Any]) -> None:
        if self.publish is None:
            return
        try:
            await self.publish(message)
        except Exception as exc:  # a closed socket must not stop the job
            logger.debug(f"[Memory] 控制台进度推送失败：{exc}")

    def _progress(self, job: JobState) -> Callable[[int, int], None]:
        def report(done: int, total: int) -> None:
            job.done, job.total = done, total
            now = time.monotonic()
            if done >= total or now - self._last_publish >= PUBLISH_INTERVAL:
                self._last_publish = now
                self._spawn(self._send({"event": "progress", "job": job.to_json()}))

        return report

    # -- backups -----------------------------------------------------------------------

    def backups(self) -> dict[str, Any]:
        infos = list_backups(self.maint.backup_dir)
        return {
            "backup_dir": str(self.maint.backup_dir),
            "keep": self.maint.env.reembed_backup_keep,
            "backups": [backup_json(b) for b in infos],
        }

    async def create_backup(self, actor: str) -> dict[str, Any]:
        """Write a backup now (no embedding service needed); refused during another job."""
        self._refuse_if_busy()
        self._active = "backup"
        try:
            info = await guarded("console_backup", lambda: create_backup(self.maint))
        finally:
            self._active = None
        audit(actor, "创建备份", name=info.path.name)
        return {**backup_json(info), "keep": self.maint.env.reembed_backup_keep}

    def _backup_path(self, name: Any) -> Any:
        """A backup of the backup directory, by file name only (never a path)."""
        if not isinstance(name, str):
            not_found("备份不存在")
        for info in list_backups(self.maint.backup_dir):
            if info.path.name == name:
                return info.path
        not_found(f"备份 {name[:80]!r} 不存在（只能按文件名恢复备份目录中的备份）")

    # -- long jobs -------------------------------------------------------------------------

    async def start_reindex(self, actor: str) -> dict[str, Any]:
        return self._start(
            actor, "reindex", lambda job: remap(self.maint, progress=self._progress(job))
        )

    async def start_restore(self, actor: str, name: Any) -> dict[str, Any]:
        path = self._backup_path(name)
        await guarded("console_restore", lambda: _validate_backup(path))
        return self._start(
            actor,
            "restore",
            lambda job: restore_backup(self.maint, path, progress=self._progress(job)),
            name=path.name,
        )

    def _start(
        self,
        actor: str,
        kind: str,
        work: Callable[[JobState], Awaitable[RemapReport]],
        **ids: object,
    ) -> dict[str, Any]:
        self._refuse_if_busy()
        self._active = kind
        job = JobState(uuid.uuid4().hex[:12], kind, actor, message="准备中")
        self.job = job
        self._spawn(self._run(job, work))
        audit(actor, f"开始{_LABELS[kind]}", job=job.id, **ids)
        return job.to_json()

    async def _run(
        self,
        job: JobState,
        work: Callable[[JobState], Awaitable[RemapReport]],
    ) -> None:
        label = _LABELS[job.kind]
        state, message, result = "failed", "", None
        try:
            await self._send({"event": "started", "job": job.to_json()})
            try:
                async with self.store.gate.closed(label):
                    job.message = "进行中"
                    report = await work(job)
            except Exception as exc:
                message = str(exc) or exc.__class__.__name__
                logger.error(f"[Memory] 控制台{label}失败：{message}")
            else:
                state, result = "done", _report_json(report)
                message = f"{label}完成：共 {report.total} 条"
                logger.info(f"[Memory] 控制台{label}完成（job={job.id}，{report.total} 条）")
            finally:
                self.store.invalidate()
                self.catalog.invalidate()
            if self.knowledge is not None:
                await check_knowledge_base(self.knowledge)
        finally:
            # The outcome becomes visible only once the slot is free again.
            job.state, job.message, job.result = state, message or "已中止", result
            job.finished_at = _now()
            self._active = None
        await self._send({"event": "finished", "job": job.to_json()})


async def _validate_backup(path: Any) -> None:
    """Read the whole backup before anything is started (a bad file is a 400, not a failed job)."""
    await asyncio.to_thread(load_backup, path)


def _report_json(report: RemapReport) -> dict[str, Any]:
    return {
        "counts": dict(report.counts),
        "total": report.total,
        "fingerprint": report.fingerprint.describe(),
        "backup": report.backup.name if report.backup else None,
        "backup_path": str(report.backup) if report.backup else None,
    }
