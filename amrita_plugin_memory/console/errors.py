"""Errors of console operations, and the audit line every write leaves.

A :class:`ConsoleError` carries the HTTP status and the Chinese message the
operator sees. :func:`guarded` maps the plugin's expected failures to it with
the same messages the chat tools give (it reuses
:func:`..tools.args.guard_tool_call`), so a console edit and a tool call that
fail for the same reason say the same thing.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, NoReturn, TypeVar

from nonebot import logger

from ..core.errors import (
    EmbeddingError,
    MaintenanceInProgress,
    MemoryLimitReached,
    VectorStoreError,
)
from ..core.text import cut
from ..embedding.errors import BackupError
from ..subconscious.knowledge_base import KnowledgeError
from ..subconscious.profile_store import ProfileError
from ..tools.args import ToolArgError, guard_tool_call

__all__ = ["ConsoleError", "audit", "bad_request", "guarded", "not_found"]

T = TypeVar("T")


class ConsoleError(Exception):
    """An operation that was not done: HTTP ``status`` and a message for the operator."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def bad_request(message: str) -> NoReturn:
    raise ConsoleError(400, message)


def not_found(message: str) -> NoReturn:
    raise ConsoleError(404, message)


async def _message_of(name: str, exc: Exception) -> str:
    """The tool layer's message (and warning log) for a service failure."""

    async def reraise() -> dict[str, Any]:
        raise exc

    result = await guard_tool_call("[Memory] 控制台", name, reraise)
    return str(result.get("error") or exc)


async def guarded(name: str, call: Callable[[], Awaitable[T]]) -> T:
    """Run an operation; expected failures become a :class:`ConsoleError`.

    Bad input (tool argument parsers, knowledge and profile validation,
    backup files) is 400; a write refused during maintenance is 409; an
    unavailable embedding service or vector store is 503 with the tools'
    "nothing was done" message. Anything else propagates (a 500, logged).
    """
    try:
        return await call()
    except ConsoleError:
        raise
    except (ToolArgError, KnowledgeError, ProfileError, BackupError, MemoryLimitReached) as exc:
        raise ConsoleError(400, str(exc)) from None
    except MaintenanceInProgress as exc:
        raise ConsoleError(409, str(exc)) from None
    except (EmbeddingError, VectorStoreError, OSError) as exc:
        raise ConsoleError(503, await _message_of(name, exc)) from None


def audit(actor: str, action: str, **ids: object) -> None:
    """One INFO line per write: who, what, which ids (never the text)."""
    where = " ".join(f"{k}={v}" for k, v in ids.items() if v is not None)
    logger.info(f"[Memory] 控制台 {cut(actor, 64)}：{action} {where}".rstrip())
