"""``ambot memory status``: a read-only picture of the store (works with the embedding service down).

It also shows a remap's "running" marker (see :mod:`.recovery`): on a remote
Chroma it outlives a killed ``reindex`` / ``backup restore`` and keeps every
writer refusing until recovery removes it, so the operator must see it, with
what to do.
"""

from __future__ import annotations

import json
import os
import socket
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from ..core.errors import EmbeddingError
from ..storage.chroma.remap_markers import maintenance_busy
from ..storage.keys import KEY_FORMAT_META, current_key_format
from ..storage.memory_store import MemoryStore
from .backup import BackupInfo, list_backups
from .client import EmbeddingConfigError
from .fingerprint import FingerprintInfo, current_fingerprint
from .maintenance import (
    META_REEMBED_COMPLETE,
    META_REEMBED_RUNNING,
    META_REEMBED_TARGET,
    Maintenance,
    count_of,
    meta_of,
    open_collection,
)

__all__ = ["RemapMarker", "StatusReport", "collect_status", "memory_distribution"]

_KINDS = {"reindex": "重映射（reindex）", "restore": "从备份恢复（backup restore）"}


def _process_state(pid: int | None, host: str | None) -> Literal["running", "gone", "unknown"]:
    """Whether the process that set a marker still runs (only knowable on this host, POSIX)."""
    if pid is None or host != socket.gethostname() or os.name != "posix":
        return "unknown"  # os.kill(pid, 0) would terminate the process on Windows
    if pid == os.getpid():
        return "running"
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return "gone"
    except PermissionError:
        return "running"  # exists, owned by another user
    except OSError:
        return "unknown"
    return "running"


@dataclass(slots=True)
class RemapMarker:
    """A remap marker found on the covered collections (writers refuse while it is there)."""

    collections: list[str]
    kind: str | None = None
    pid: int | None = None
    host: str | None = None
    since: str | None = None
    committed: bool = False
    """The remap passed its commit point: recovery finishes the swap instead of dropping it."""
    process: Literal["running", "gone", "unknown"] = field(default="unknown")

    @classmethod
    def from_note(cls, collections: list[str], note: Any, committed: bool) -> RemapMarker:
        """Parse the JSON note :func:`.recovery.mark_running` writes (tolerates anything)."""
        try:
            data = json.loads(note) if isinstance(note, str) and note else {}
        except ValueError:
            data = {}
        data = data if isinstance(data, Mapping) else {}
        pid = data.get("pid")
        pid = pid if isinstance(pid, int) and not isinstance(pid, bool) and pid > 0 else None
        host = data.get("host") if isinstance(data.get("host"), str) else None
        marker = cls(
            collections,
            kind=str(data["kind"]) if data.get("kind") else None,
            pid=pid,
            host=host,
            since=data.get("since") if isinstance(data.get("since"), str) else None,
            committed=committed,
        )
        marker.process = _process_state(pid, host)
        return marker

    @property
    def summary(self) -> str:
        """One line: what is marked, by whom, since when."""
        what = _KINDS.get(self.kind or "", "重映射")
        who = [f"PID {self.pid}" if self.pid else None, f"主机 {self.host}" if self.host else None]
        by = "，".join(x for x in who if x)
        since = f"，开始于 {self.since}" if self.since else ""
        origin = f"（{by}{since}）" if by or since else ""
        return f"维护标记：{what}未结束{origin}；带标记的集合：{', '.join(self.collections)}"

    @property
    def advice(self) -> list[str]:
        """What the marker means and what the operator should do, in order."""
        lines = [
            "标记存在期间，所有进程写入记忆与知识库都会被拒绝（“记忆库维护中”），检索不受影响。"
        ]
        if self.process == "running":
            return [
                *lines,
                "该进程仍在运行：维护正在进行，完成后标记自动清除，请等待它结束。",
            ]
        if self.process == "gone":
            lines.append("该进程已不存在：维护被中断（如 kill -9、断电、断网），标记不会自己消失。")
            when = ""
        else:
            where = f"（它在另一台主机 {self.host} 上）" if self.host and self.pid else ""
            lines.append(f"无法确认进行维护的进程是否仍在运行{where}。")
            when = "确认它已不在运行后，"
        if self.committed:
            lines.append(
                f"{when}重启 Bot 或运行 `ambot memory reindex`：新集合已完整（重映射已提交），"
                "会自动完成切换、写入新指纹并清除标记。"
            )
        else:
            lines.append(
                f"{when}原集合完好、没有记忆丢失：运行 `ambot memory reindex` 重新执行"
                "（先清除标记与临时集合，再从头开始），或重启 Bot（启动时自动清除标记，写入恢复）。"
            )
        return lines


def _find_marker(
    metas: Mapping[str, Mapping[str, Any]], memory_temp: Mapping[str, Any] | None, memory: str
) -> RemapMarker | None:
    """The marker on the covered collections (``metas``: name -> metadata), if any."""
    marked = [name for name, meta in metas.items() if maintenance_busy(meta)]
    if not marked:
        return None
    note = next(
        (meta[META_REEMBED_RUNNING] for meta in metas.values() if meta.get(META_REEMBED_RUNNING)),
        None,
    )
    committed = (memory_temp is not None and memory_temp.get(META_REEMBED_COMPLETE) is True) or (
        META_REEMBED_TARGET in metas.get(memory, {})
    )
    return RemapMarker.from_note(marked, note, committed)


@dataclass(slots=True)
class StatusReport:
    """Everything ``ambot memory status`` prints."""

    vector_db: str
    stored: FingerprintInfo | None
    current: FingerprintInfo | None
    current_error: str | None
    memory_total: int
    distribution: dict[tuple[str, str], int]
    knowledge_name: str
    knowledge_count: int | None
    archive_count: int
    """Archived memories and previous versions (``storage.archive.store``)."""
    key_format_stored: str | None
    key_format_current: str
    pending_temps: list[str]
    backups: list[BackupInfo]
    config_problem: bool = False
    """``current_error`` is a configuration problem (``auto`` found no model), not an outage."""
    remap_marker: RemapMarker | None = None
    """A remap's marker on the covered collections (writers refuse while it is there)."""
    vector_pending: int = 0
    """Memories stored without their vector (an outage, or no embedding model), found by
    keywords until the background embedding gives them one (issue #47)."""
    keyword_only: bool = False
    """``EMBEDDING_ENABLED=false``: no embedding model, every memory found by keywords."""

    @property
    def match(self) -> bool | None:
        """Whether the stored vectors fit the current configuration (``None``: unknown).

        A fingerprint written from another spelling of the same server's URL
        matches (the bot migrates it silently at its next start).
        """
        if self.current is None:
            return None
        stored = self.stored
        return stored is not None and (
            stored.fingerprint == self.current.fingerprint or stored.same_service(self.current)
        )

    @property
    def state(self) -> tuple[str, str | None]:
        """The fingerprint's state line of ``ambot memory status`` and its colour."""
        if self.keyword_only:
            return (
                "无嵌入模式（EMBEDDING_ENABLED=false）—— 按关键词检索；已有向量原样保留，"
                "重新开启嵌入后自动补齐",
                None,
            )
        if self.current is None:
            if self.config_problem:
                return (
                    "配置问题 —— EMBEDDING_MODEL_NAME=auto 无法确定嵌入模型；"
                    "请在 .env 中设置 EMBEDDING_MODEL_NAME 为要使用的嵌入模型名",
                    "yellow",
                )
            return "未知 —— 嵌入服务恢复后重新运行本命令", None
        if self.match:
            return "一致", "green"
        if self.stored is None and self.memory_total == 0:
            return "记忆库为空，Bot 启动时（或嵌入服务可用后首次嵌入时）自动写入指纹", None
        return (
            "不一致 —— 检索结果会劣化；运行 `ambot memory reindex` 重映射，"
            "确认模型未变时可运行 `ambot memory reset-fingerprint`",
            "yellow",
        )


async def memory_distribution(store: MemoryStore) -> dict[tuple[str, str], int]:
    """Memory count per ``(partition, scope)`` over the whole collection."""
    counts: dict[tuple[str, str], int] = {}
    async for page in store.iter_all_records():
        for record in page:
            key = (record.partition, record.scope)
            counts[key] = counts.get(key, 0) + 1
    return counts


async def collect_status(maint: Maintenance) -> StatusReport:
    """Read-only state of the store; works with the embedding service down."""
    conn = maint.connection
    knowledge, archive, memory = maint.covered
    existing = await conn.list_collections()
    meta = await maint.store.get_metadata() if memory.name in existing else {}
    current: FingerprintInfo | None = None
    error: str | None = None
    config_problem = False
    try:
        current = await current_fingerprint(maint.embedder, probe=True)
    except EmbeddingError as exc:
        error = str(exc)
        config_problem = isinstance(exc, EmbeddingConfigError)
    distribution = await memory_distribution(maint.store) if memory.name in existing else {}
    kcol = await open_collection(conn, knowledge.name) if knowledge.name in existing else None
    acol = await open_collection(conn, archive.name) if archive.name in existing else None
    metas = {
        name: meta_of(col) for name, col in ((knowledge.name, kcol), (archive.name, acol)) if col
    }
    if memory.name in existing:
        metas[memory.name] = meta
    mtemp = await open_collection(conn, memory.temp) if memory.temp in existing else None
    return StatusReport(
        vector_db=conn.describe(),
        stored=FingerprintInfo.from_meta(meta),
        current=current,
        current_error=error,
        memory_total=sum(distribution.values()),
        distribution=distribution,
        knowledge_name=knowledge.name,
        knowledge_count=await count_of(conn, kcol) if kcol is not None else None,
        archive_count=await count_of(conn, acol) if acol is not None else 0,
        key_format_stored=meta.get(KEY_FORMAT_META),
        key_format_current=current_key_format(),
        pending_temps=[c.temp for c in maint.covered if c.temp in existing],
        backups=list_backups(maint.backup_dir),
        config_problem=config_problem,
        remap_marker=_find_marker(metas, meta_of(mtemp) if mtemp else None, memory.name),
        vector_pending=await maint.store.count_pending() if memory.name in existing else 0,
        keyword_only=not maint.embedder.enabled,
    )
