"""Shared pieces of the active-memory tests: the ``active`` fixture, extraction requests."""

from __future__ import annotations

import asyncio
import json
import re
import threading
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from tests.helpers import view_of
from tests.servers import ChatServer, Reply

MARKER = "[memory-extraction]"


@pytest.fixture
async def active() -> AsyncIterator[Callable[..., Any]]:
    """Switch the session's active memory on (``[active_memory]`` keys as keywords); restore after.

    Idle batching is off by default here (``idle_seconds`` very long): tests
    start extractions by count or with :func:`settle`.
    """
    from amrita_plugin_memory.adapters.active_hooks import current_active

    hooks = current_active()
    assert hooks is not None
    service = hooks.active
    saved = service.config

    def configure(**values: Any) -> Any:
        base = {"enabled": True, "idle_seconds": 3600, **values}
        section = saved.active_memory.model_copy(update=base)
        service.configure(saved.model_copy(update={"active_memory": section}))
        return service

    yield configure
    await service.queue.close()
    service.configure(saved)


async def settle(service: Any) -> None:
    """Extract every waiting batch now and wait for it (a hang guard, not a measurement)."""
    async with asyncio.timeout(60):
        await service.flush()


def is_extraction(request: dict[str, Any]) -> bool:
    first = request["messages"][0]
    return first["role"] == "system" and str(first["content"]).startswith(MARKER)


def extractions(server: ChatServer) -> list[dict[str, Any]]:
    return [r for r in server.requests if is_extraction(r)]


def answer_rule(
    answer: Callable[[dict[str, Any]], Any],
    *,
    hold: threading.Event | None = None,
    delay: float = 0.0,
) -> Any:
    """Answer extraction requests with ``answer(body)`` (a dict → JSON, a str verbatim,
    a :class:`Reply` as it is), once ``hold`` is set (a model still thinking), or after
    ``delay`` seconds (a slow model: what the test does meanwhile needs no exact timing)."""

    def rule(body: dict[str, Any]) -> Reply | None:
        if not is_extraction(body):
            return None
        value = answer(body)
        if isinstance(value, Reply):
            return value
        text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
        return Reply(content=text, hold=hold, delay=delay)

    return rule


def shown_refs(request: dict[str, Any]) -> dict[str, str]:
    """``{"M1": "<memory text>", …}`` as shown in an extraction request."""
    text = request["messages"][1]["content"]
    return {m.group(1): m.group(2) for m in re.finditer(r"^(M\d+): (.*)（[^（）]+）$", text, re.M)}


def ref_of(request: dict[str, Any], content: str) -> str:
    for ref, text in shown_refs(request).items():
        if text == content:
            return ref
    raise AssertionError(f"{content!r} not shown in {shown_refs(request)}")


async def live(uid: int) -> dict[str, Any]:
    """``{content: record}`` of every live memory of user ``uid``."""
    from amrita_plugin_memory.storage.keys import user_key
    from tests.helpers import runtime

    out: dict[str, Any] = {}
    async for page in runtime().store.iter_records(view_of(user_key(uid)), with_documents=True):
        out.update({r.content: r for r in page})
    return out


async def archived(uid: int) -> list[Any]:
    """The archive rows of user ``uid``'s partition."""
    from amrita_plugin_memory.storage.keys import user_key
    from tests.helpers import runtime

    return await runtime().store.archive.list(view_of(user_key(uid)), limit=100)
