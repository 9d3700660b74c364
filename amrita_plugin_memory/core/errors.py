"""The plugin's errors: one root with a kind, and one table of what each kind says.

Every error the plugin raises on purpose is a :class:`PluginError` (beside the builtin
class it has always been, so ``except ValueError`` / ``OSError`` keep working) with a
:class:`ErrorKind`. :data:`WORDS` turns a kind into what each audience reads: the chat
tool's result and the ``/memory`` commands (``tools/args.guard_tool_call``), the admin
console's HTTP status and message (``console/errors.guarded``) and the ``ambot memory``
line (``cli/plumbing.run``); :func:`describe` is the one place that consults it. Every
message is meant for people: Chinese for users and operators.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Literal

__all__ = [
    "WORDS",
    "DataDirLocked",
    "Described",
    "DimensionMismatch",
    "EmbeddingConfigError",
    "EmbeddingError",
    "EmbeddingHTTPError",
    "EmbeddingOff",
    "EmbeddingResponseError",
    "EmbeddingUnavailable",
    "ErrorKind",
    "MaintenanceInProgress",
    "MemoryLimitReached",
    "PluginError",
    "ScopeRefused",
    "VectorStoreError",
    "Words",
    "WriteFenced",
    "describe",
    "kind_of",
]


class ErrorKind(StrEnum):
    """What went wrong, as far as the caller is concerned (the rows of :data:`WORDS`)."""

    INVALID = "invalid"
    """The caller's input is unusable (a tool argument, an operator's parameter, a file)."""
    REFUSED = "refused"
    """The caller may not do this here (the request's scope, a right it lacks)."""
    NOT_FOUND = "not_found"
    """What the request names does not exist (or is not the caller's)."""
    FULL = "full"
    """The partition holds as many memories as it may."""
    CONFLICT = "conflict"
    """The current state does not allow it now: maintenance or another sweeper runs, a
    user opted out, the memory a version belongs to is archived."""
    EMBEDDING = "embedding"
    """The embedding service failed, is unreachable or answered unusable vectors."""
    EMBEDDING_CONFIG = "embedding_config"
    """The embedding model cannot be decided from the configuration."""
    DIMENSION = "dimension"
    """The embedding service's vectors do not fit the stored ones."""
    STORE = "store"
    """The vector store (or the shared database) failed or is unreachable."""
    FILES = "files"
    """A file could not be read or written."""
    FAILED = "failed"
    """An operation of the operator's failed; its message says what and what was kept."""
    FENCED = "fenced"
    """Background work for a user was voided: never shown, the work stops."""


Level = Literal["info", "warning"]


@dataclass(frozen=True, slots=True)
class Words:
    """What one kind of failure says: ``{message}`` is the error's own text, ``{cls}`` its class.

    ``tool`` is the chat's and the console's text (``None``: not a tool result, the
    error propagates); ``status`` the console's HTTP status; ``cli`` the ``ambot memory``
    line; ``log`` the line logged as ``<prefix> <name> <log>`` (``None``: the caller's
    own mistake, nothing logged)."""

    status: int
    tool: str | None = "{message}"
    cli: str = "{message}"
    log: str | None = None
    level: Level = "warning"


WORDS: dict[ErrorKind, Words] = {
    ErrorKind.INVALID: Words(400),
    ErrorKind.REFUSED: Words(403),
    ErrorKind.NOT_FOUND: Words(404),
    ErrorKind.FULL: Words(400),
    ErrorKind.CONFLICT: Words(409, log="未执行：{message}", level="info"),
    ErrorKind.EMBEDDING: Words(
        503, tool="嵌入服务不可用，本次操作未执行：{message}", log="失败：嵌入服务错误：{message}"
    ),
    ErrorKind.EMBEDDING_CONFIG: Words(
        503,
        tool="嵌入模型配置有误（请管理员检查 EMBEDDING_MODEL_NAME），本次操作未执行：{message}",
        log="失败：嵌入模型配置有误：{message}",
    ),
    ErrorKind.DIMENSION: Words(
        503,
        tool="嵌入服务返回的向量与记忆库不匹配，本次操作未执行：{message}",
        log="失败：{message}",
    ),
    ErrorKind.STORE: Words(
        503, tool="向量数据库不可用，本次操作未执行：{message}", log="失败：{message}"
    ),
    ErrorKind.FILES: Words(
        503, tool="文件读写失败，本次操作未执行：{cls}", log="失败：文件读写错误：{message}"
    ),
    ErrorKind.FAILED: Words(500, log="失败：{message}"),
    ErrorKind.FENCED: Words(409, tool=None),
}


class PluginError(Exception):
    """The root of every error the plugin raises on purpose.

    Its :attr:`kind` says what went wrong for the caller; :data:`WORDS` what that says
    to whom. A subclass sets ``kind`` (an instance may too, where one class covers
    several cases); the builtin base it also has (``ValueError``, ``RuntimeError``,
    ``OSError``) is kept for code that catches by it.
    """

    kind: ErrorKind = ErrorKind.FAILED


@dataclass(frozen=True, slots=True)
class Described:
    """One error as each audience reads it (:func:`describe`)."""

    kind: ErrorKind
    tool: str | None
    """The chat tool's, the ``/memory`` command's and the console's text (``None``:
    propagates)."""
    status: int
    """The console's HTTP status."""
    cli: str
    """The ``ambot memory`` line (after ``错误：``)."""
    log: str | None
    """What to log after ``<prefix> <name>`` (``None``: nothing, the caller's mistake)."""
    level: Level


def kind_of(exc: BaseException) -> ErrorKind | None:
    """The kind of ``exc``: a :class:`PluginError`'s own, ``FILES`` for any ``OSError``
    (the file system's errors are expected too), ``None`` for anything else (a bug)."""
    if isinstance(exc, PluginError):
        return exc.kind
    if isinstance(exc, OSError):
        return ErrorKind.FILES
    return None


def describe(exc: BaseException) -> Described | None:
    """What ``exc`` says to each audience (:data:`WORDS`), or ``None``: nobody expected
    it, it propagates (a traceback in the log, never in a chat)."""
    kind = kind_of(exc)
    if kind is None:
        return None
    words = WORDS[kind]
    fields = {"message": str(exc), "cls": exc.__class__.__name__}
    return Described(
        kind=kind,
        tool=None if words.tool is None else words.tool.format(**fields),
        status=words.status,
        cli=words.cli.format(**fields),
        log=None if words.log is None else words.log.format(**fields),
        level=words.level,
    )


class VectorStoreError(PluginError, RuntimeError):
    """ChromaDB failed or is unreachable; the message is meant for humans."""

    kind = ErrorKind.STORE


class DataDirLocked(VectorStoreError):
    """Another process holds the embedded ChromaDB directory."""


class DimensionMismatch(VectorStoreError):
    """The embedding service returned vectors of another size than the collection's."""

    kind = ErrorKind.DIMENSION


class MaintenanceInProgress(VectorStoreError):
    """A re-embedding (``reindex`` / ``restore``) is replacing the collection: writes wait.

    ``ambiguous``: the write took so long that a remap started meanwhile; it
    was not acknowledged and may or may not survive the remap.
    """

    kind = ErrorKind.CONFLICT

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

    kind = ErrorKind.FULL

    def __init__(self, limit: int, count: int) -> None:
        super().__init__(f"该分区的记忆已达上限（{count}/{limit} 条），请先合并或删除旧记忆")
        self.limit = limit
        self.count = count


class WriteFenced(PluginError, RuntimeError):
    """Background work for a user was voided (a forget or an opt-out) before it wrote."""

    kind = ErrorKind.FENCED

    def __init__(self, user_id: str, why: str) -> None:
        super().__init__(f"用户 {user_id} 的后台任务已作废（{why}），未写入")
        self.user_id = user_id
        self.why = why


class EmbeddingError(PluginError, RuntimeError):
    """Base class of every embedding failure."""

    kind = ErrorKind.EMBEDDING


class EmbeddingUnavailable(EmbeddingError):
    """The service could not be reached (refused, reset, timed out)."""


class EmbeddingOff(EmbeddingUnavailable):
    """``EMBEDDING_ENABLED=false``: no embedding model is used at all (keyword-only mode).

    Raised at once by the disabled client, never after a wait: every caller that falls
    back to keywords during an outage does the same here."""

    def __init__(self) -> None:
        super().__init__("嵌入已关闭（EMBEDDING_ENABLED=false），仅用关键词检索")


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

    kind = ErrorKind.EMBEDDING_CONFIG


class ScopeRefused(PluginError, ValueError):
    """The request's scope does not allow this (a group partition outside a group, a
    right the caller lacks); the message goes back to the model or the user."""

    kind = ErrorKind.REFUSED
