"""Shared pieces of the group-awareness chat-turn tests: the ``groups`` fixture, prompts, turns."""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from tests.chat import BotRecorder, make_bot, run_turn
from tests.helpers import seen_by_model
from tests.servers import ChatServer, Reply

MARKER = "[persona-extraction]"


class Clock:
    """Wall-clock seconds moved on by hand: it starts at the real time, because a message's
    time is compared with the real times of forgets and opt-outs (the shared void points)."""

    def __init__(self, now: float | None = None) -> None:
        self.now = time.time() if now is None else now

    def __call__(self) -> float:
        return self.now


@pytest.fixture
async def groups() -> AsyncIterator[Callable[..., Any]]:
    """Switch the session's group awareness on (sections as keyword dicts); restore afterwards."""
    from amrita_plugin_memory.adapters.group_hooks import current_hooks

    hooks = current_hooks()
    assert hooks is not None
    awareness = hooks.awareness
    saved, saved_clock = awareness.config, awareness.clock
    clock = Clock()

    def configure(**sections: dict[str, Any]) -> Any:
        update: dict[str, Any] = {}
        for name, values in {"group_context": {}, "persona": {}, **sections}.items():
            base = {"enabled": True} if name in ("group_context", "persona") else {}
            update[name] = getattr(saved, name).model_copy(update={**base, **values})
        awareness.configure(saved.model_copy(update=update))
        awareness.clock = awareness.extractor.clock = clock
        return awareness

    yield configure
    await settle(awareness)
    awareness.configure(saved)
    awareness.clock = awareness.extractor.clock = saved_clock


async def settle(awareness: Any) -> None:
    async with asyncio.timeout(30):  # a hang guard, not a measurement
        await awareness.drain()


def extraction_rule(answer: Callable[[dict[str, Any]], dict[str, Any]]) -> Callable[..., Any]:
    def rule(body: dict[str, Any]) -> Reply | None:
        first = body["messages"][0]
        if first["role"] == "system" and str(first["content"]).startswith(MARKER):
            return Reply.text(json.dumps(answer(body), ensure_ascii=False))
        return None

    return rule


def is_extraction(request: dict[str, Any]) -> bool:
    return str(request["messages"][0]["content"]).startswith(MARKER)


def turn_requests(server: ChatServer) -> list[dict[str, Any]]:
    """The chat turns' model requests (not checks, not extractions)."""
    out = []
    for request in server.requests:
        names = [t["function"]["name"] for t in request.get("tools") or []]
        if names == ["report"] or is_extraction(request):
            continue
        out.append(request)
    return out


def turn_prompts(server: ChatServer) -> list[str]:
    """What the chat turns' model requests show of the plugin (not checks, not extractions):
    the system prompt, then the current turn's message (``tests.helpers.seen_by_model``)."""
    return [seen_by_model(request) for request in turn_requests(server)]


def block(prompt: str, tag: str) -> str:
    match = re.search(rf"<{tag}>\n(.*?)\n</{tag}>", prompt, re.DOTALL)
    return match.group(1) if match else ""


async def say(event: Any, *, recorder: BotRecorder | None = None) -> BotRecorder:
    """Deliver one event as a real turn (or command) and return what the bot sent."""
    recorder = recorder or BotRecorder()
    await run_turn(make_bot(recorder), event)
    return recorder


def group_view(group_id: int | str, user_id: int | str = 10001) -> Any:
    """The :class:`GroupView` a turn of ``user_id`` in group ``group_id`` reads with (its
    scope's ``group_view``): what a test passes to the chat-path reads of the group stores."""
    from amrita_plugin_memory.storage.keys import target_from_ids
    from amrita_plugin_memory.storage.scope import ScopeRules

    return ScopeRules().of_turn(target_from_ids(user_id, group_id)).group_view()
