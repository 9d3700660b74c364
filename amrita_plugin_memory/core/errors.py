"""Errors shared across layers; every message is meant for operators or the model."""

from __future__ import annotations

__all__ = [
    "DataDirLocked",
    "DimensionMismatch",
    "EmbeddingError",
    "EmbeddingHTTPError",
    "EmbeddingResponseError",
    "EmbeddingUnavailable",
    "MemoryLimitReached",
    "VectorStoreError",
]


class VectorStoreError(RuntimeError):
    """ChromaDB failed or is unreachable; the message is meant for humans."""


class DataDirLocked(VectorStoreError):
    """Another process holds the embedded ChromaDB directory."""


class DimensionMismatch(VectorStoreError):
    """The embedding service returned vectors of another size than the collection's."""


class MemoryLimitReached(VectorStoreError):
    """The partition already holds ``limit`` memories."""

    def __init__(self, limit: int, count: int) -> None:
        super().__init__(f"该分区的记忆已达上限（{count}/{limit} 条），请先合并或删除旧记忆")
        self.limit = limit
        self.count = count


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
