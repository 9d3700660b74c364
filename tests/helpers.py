"""One helper per concept, shared by the test modules."""

from __future__ import annotations

import asyncio
import copy
import dataclasses
import gc
import json
import time
from pathlib import Path
from types import TracebackType
from typing import Any

from tests.servers import ChatServer

__all__ = [
    "LoopStalls",
    "chat_requests",
    "new_memory",
    "partition",
    "runtime",
    "runtime_with",
    "seen_by_model",
    "system_prompt",
    "turn_message",
    "user_view",
    "view_of",
    "write_rules",
]


def view_of(partition: str, origins: Any = None) -> Any:
    """What a test's store read may see: every memory of ``partition`` (an operator's
    view), or only those ``origins`` (a ``core.records.OriginFilter``) lets through."""
    from amrita_plugin_memory.storage.scope import View, operator_view

    return operator_view(partition) if origins is None else View(partition, origins)


def user_view(user_id: int | str) -> Any:
    """What a test's read of one user's rows (usage, consent, loop items) names: the
    ``storage.scope.UserView`` of ``user_id`` (an operator's)."""
    from amrita_plugin_memory.storage.scope import operator_user_view

    return operator_user_view(str(user_id))


def new_memory(partition: str, scope: str, content: str, **fields: Any) -> Any:
    """A ``core.writes.NewMemory`` (what a test writes with ``MemoryStore.add`` / ``write``)."""
    from amrita_plugin_memory.core.writes import NewMemory

    return NewMemory(partition, scope, content, **fields)


def write_rules(**rules: Any) -> Any:
    """A ``core.writes.WriteRules`` (``merge``, ``limit``, ``displace``, ``fence``)."""
    from amrita_plugin_memory.core.writes import WriteRules

    return WriteRules(**rules)


def runtime() -> Any:
    """The plugin's :class:`MemoryRuntime` of the test session (loaded by conftest)."""
    import amrita_plugin_memory

    assert amrita_plugin_memory.runtime is not None
    return amrita_plugin_memory.runtime


def runtime_with(tmp_path: Path, *, own_data_dir: bool = False, **subconscious: Any) -> Any:
    """A copy of the session runtime with another ``[subconscious]`` section and config dir.

    ``own_data_dir`` also moves the data dir (profile, knowledge files) under ``tmp_path``.
    """
    rt = runtime()
    file = rt.config.file.model_copy(
        update={"subconscious": rt.config.file.subconscious.model_copy(update=subconscious)}
    )
    dirs: dict[str, Path] = {"config_dir": tmp_path / "config"}
    if own_data_dir:
        dirs["data_dir"] = tmp_path / "data"
    clone = copy.copy(rt)
    clone.config = dataclasses.replace(rt.config, file=file, **dirs)
    return clone


def partition(uid: int) -> str:
    """The personal partition key of QQ user ``uid`` (Amrita's current format)."""
    return f"QQPlatform_Private_{uid}"


def system_prompt(request: dict[str, Any]) -> str:
    """The system message of one model request."""
    first = request["messages"][0]
    assert first["role"] == "system"
    return first["content"] if isinstance(first["content"], str) else json.dumps(first["content"])


def turn_message(request: dict[str, Any]) -> str:
    """The current turn's user message of one model request: the user's words, then the
    plugin's per-turn section (``adapters/turn_context``) when it shows one."""
    for message in reversed(request["messages"]):
        if message["role"] == "user":
            content = message["content"]
            return content if isinstance(content, str) else json.dumps(content, ensure_ascii=False)
    return ""


def seen_by_model(request: dict[str, Any]) -> str:
    """Where the plugin's blocks stand in one request: the system prompt (``<SELF>``, the
    memo), then the current turn's message (the per-turn blocks)."""
    return f"{system_prompt(request)}\n{turn_message(request)}"


def chat_requests(server: ChatServer) -> list[dict[str, Any]]:
    """Requests of the answering chat model (not the content check, not the L3 loop)."""
    out = []
    for request in server.requests:
        names = [t["function"]["name"] for t in request.get("tools") or []]
        if names == ["report"] or any(n.startswith("subconscious_") for n in names):
            continue
        out.append(request)
    return out


class LoopStalls:
    """How long work of this process kept the event loop from running (``async with``).

    A ticker sleeps ``tick`` seconds over and over; a tick that comes back late
    was held up by this process (the loop thread busy, a worker holding the
    GIL, a garbage-collector pass) or by the machine running other processes
    instead (a loaded CI box). Only the first is what a test asks about, and
    only the first costs this process CPU time: a tick's stall is how late it
    came back, capped by the CPU time the whole process used meanwhile
    (``time.process_time``). So a loaded machine never fails the test, and
    this process's own blocking work is measured in full (the first tick is
    under way when the block starts, so no stall inside it is missed). The
    block's end waits for ``min_ticks`` ticks at least. The collector is
    paused meanwhile: a full pass over the test session's objects is not what
    the tests measure.
    """

    def __init__(self, tick: float = 0.005, *, min_ticks: int = 0) -> None:
        self.tick = tick
        self.min_ticks = min_ticks
        self.stalls: list[float] = []
        self._stop = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    @property
    def worst(self) -> float:
        return max(self.stalls, default=0.0)

    async def _ticks(self) -> None:
        loop = asyncio.get_running_loop()
        while not self._stop.is_set() or len(self.stalls) < self.min_ticks:
            started, cpu = loop.time(), time.process_time()
            await asyncio.sleep(self.tick)
            late = loop.time() - started - self.tick
            self.stalls.append(max(0.0, min(late, time.process_time() - cpu)))

    async def __aenter__(self) -> LoopStalls:
        gc.disable()
        self._task = asyncio.create_task(self._ticks())
        await asyncio.sleep(0)  # the first tick is under way
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._stop.set()
        try:
            if self._task is not None:
                await self._task
        finally:
            gc.enable()
