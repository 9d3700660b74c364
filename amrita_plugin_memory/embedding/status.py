"""``ambot memory status``: a read-only picture of the store (works with the embedding service down)."""

from __future__ import annotations

from dataclasses import dataclass

from ..core.errors import EmbeddingError
from ..storage.keys import KEY_FORMAT_META, current_key_format
from .backup import BackupInfo, list_backups
from .client import EmbeddingConfigError
from .covered import Maintenance, count_of, open_collection
from .fingerprint import FingerprintInfo, current_fingerprint

__all__ = ["StatusReport", "collect_status"]


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
    """Archived memories and previous versions (``storage.archive_store``)."""
    key_format_stored: str | None
    key_format_current: str
    pending_temps: list[str]
    backups: list[BackupInfo]
    config_problem: bool = False
    """``current_error`` is a configuration problem (``auto`` found no model), not an outage."""

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
    distribution = await maint.store.distribution() if memory.name in existing else {}
    kcol = await open_collection(conn, knowledge.name) if knowledge.name in existing else None
    acol = await open_collection(conn, archive.name) if archive.name in existing else None
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
    )
