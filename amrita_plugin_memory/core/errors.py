"""Errors shared across layers; every message is meant for operators or the model."""

from __future__ import annotations

__all__ = [
    "DataDirLocked",
    "DimensionMismatch",
    "EmbeddingConfigError",
    "EmbeddingError",
    "EmbeddingHTTPError",
    "EmbeddingResponseError",
    "EmbeddingUnavailable",
    "MaintenanceInProgress",
    "MemoryLimitReached",
    "ScopeRefused",
    "VectorStoreError",
    "WriteFenced",
]


class VectorStoreError(RuntimeError):
    """ChromaDB failed or is unreachable; the message is meant for humans."""


class DataDirLocked(VectorStoreError):
    """Another process holds the embedded ChromaDB directory."""


class DimensionMismatch(VectorStoreError):
    """The embedding service returned vectors of another size than the collection's."""


class MaintenanceInProgress(VectorStoreError):
    """A re-embedding (``reindex`` / ``restore``) is replacing the collection: writes wait.

    ``ambiguous``: the write took so long that a remap started meanwhile; it
    was not acknowledged and may or may not survive the remap.
    """

    def __init__(self, message: str | None = None, *, ambiguous: bool = False) -> None:
        if message is None:
            message = (
                "记忆库维护中，本次写入可能未生效，请稍后确认后再试"
                if ambiguous
                else "记忆库维护中，请稍后再试（本次操作未执行）"
            )
        super().__init__(message)
        self.ambiguous = ambiguous


class MemoryLimitReached(VectorStoreError):
    """The partition already holds ``limit`` memories."""

    def __init__(self, limit: int, count: int) -> None:
        super().__init__(f"该分区的记忆已达上限（{count}/{limit} 条），请先合并或删除旧记忆")
        self.limit = limit
        self.count = count


class WriteFenced(RuntimeError):
    """Background work for a user was voided (a forget or an opt-out) before it wrote."""

    def __init__(self, user_id: str, why: str) -> None:
        super().__init__(f"用户 {user_id} 的后台任务已作废（{why}），未写入")
        self.user_id = user_id
        self.why = why


class EmbeddingError(RuntimeError):
    """Base class of every embedding failure."""


class EmbeddingUnavailable(EmbeddingError):
    """The service could not be reached (refused, reset, timed out)."""


class EmbeddingHTTPError(EmbeddingError):
    """The service answered with an HTTP error status."""

    def __init__(self, status: int, detail: str) -> None:
        super().__init__(f"嵌入服务返回 HTTP {status}：{detail}")
        self.status = status
        self.detail = detail


class EmbeddingResponseError(EmbeddingError):
    """The service answered 200 but the vectors are unusable."""


class EmbeddingConfigError(EmbeddingResponseError):
    """``EMBEDDING_MODEL_NAME=auto`` cannot tell which model to use: a configuration problem.

    Not an outage: retrying or restarting does not help, setting
    ``EMBEDDING_MODEL_NAME`` does.
    """


class ScopeRefused(ValueError):
    """The request's scope does not allow this (a group partition outside a group, a
    right the caller lacks); the message goes back to the model or the user."""
