"""Errors of console operations, and the audit line every write leaves.

A :class:`ConsoleError` carries the HTTP status and the Chinese message the
operator sees. :func:`guarded` maps the plugin's expected failures to it through
the one table of ``core/errors`` (``WORDS``: the status of each kind, and the same
text a chat tool gives), so a console edit and a tool call that fail for the same
reason say the same thing.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import NoReturn, TypeVar

from nonebot import logger

from ..core.errors import WORDS, ErrorKind, PluginError, describe
from ..core.text import cut
from ..tools.args import log_failure

__all__ = ["ConsoleError", "audit", "bad_request", "conflict", "guarded", "not_found"]

T = TypeVar("T")


class ConsoleError(PluginError):
    """An operation that was not done: its kind, the HTTP ``status`` (the kind's, unless
    given) and a message for the operator."""

    def __init__(self, kind: ErrorKind, message: str, *, status: int | None = None) -> None:
        super().__init__(message)
        self.kind = kind
        self.status = status if status is not None else WORDS[kind].status
        self.message = message


def bad_request(message: str) -> NoReturn:
    raise ConsoleError(ErrorKind.INVALID, message)


def not_found(message: str) -> NoReturn:
    raise ConsoleError(ErrorKind.NOT_FOUND, message)


def conflict(message: str) -> NoReturn:
    raise ConsoleError(ErrorKind.CONFLICT, message)


async def guarded(name: str, call: Callable[[], Awaitable[T]]) -> T:
    """Run an operation; expected failures become a :class:`ConsoleError`.

    The status and the message are those ``core/errors.WORDS`` gives the failure's kind
    (bad input 400, a write refused during maintenance 409, an unavailable embedding
    service or vector store 503 with the tools' "nothing was done" message), logged as
    the tools log them. Anything else propagates (a 500, logged).
    """
    try:
        return await call()
    except ConsoleError:
        raise
    except Exception as exc:
        said = describe(exc)
        if said is None or said.tool is None:
            raise
        log_failure("[Memory] 控制台", name, said)
        raise ConsoleError(said.kind, said.tool) from None


def audit(actor: str, action: str, **ids: object) -> None:
    """One INFO line per write: who, what, which ids (never the text)."""
    where = " ".join(f"{k}={v}" for k, v in ids.items() if v is not None)
    logger.info(f"[Memory] 控制台 {cut(actor, 64)}：{action} {where}".rstrip())
