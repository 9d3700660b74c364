"""Batching a user's answered turns for extraction: by count, or after a quiet spell.

Extraction costs one model request, so it does not run after every message:
a user's unprocessed turns are collected per :class:`BatchKey` (the user's
partition and where they were said) and handed over when there are
``batch_messages`` of them, or ``idle_seconds`` after the last one. One
extraction per key runs at a time; turns that arrive meanwhile wait for the
next batch. The turns of a failed extraction are offered once more, in front
of the next batch; after that they are dropped (logged, never the text).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import NamedTuple

from nonebot import logger

__all__ = ["Batch", "BatchKey", "BatchQueue", "Turn"]


class BatchKey(NamedTuple):
    """Whose turns, and where: a private chat and each group are batched apart."""

    user_id: str
    partition: str
    """The user's memory partition (``storage.keys.user_key``)."""
    origin: str
    """``private`` or ``group:<gid>``: the origin of what this batch learns."""


@dataclass(frozen=True, slots=True)
class Turn:
    """One answered message: what the user said, and the bot's reply (context only)."""

    text: str
    reply: str = ""
    retried: bool = False
    """Already part of a failed extraction once."""


@dataclass(slots=True)
class Batch:
    key: BatchKey
    turns: list[Turn] = field(default_factory=list)


Runner = Callable[[Batch], Awaitable[bool]]
"""Runs one extraction; ``False`` means it failed and its turns may be offered again."""


@dataclass(slots=True)
class _Pending:
    turns: list[Turn] = field(default_factory=list)
    timer: asyncio.TimerHandle | None = None
    running: bool = False


class BatchQueue:
    """Unprocessed turns per key, and the tasks that extract them."""

    def __init__(self, run: Runner, *, batch_messages: int, idle_seconds: float) -> None:
        self.run = run
        self.batch_messages = batch_messages
        self.idle_seconds = idle_seconds
        self._pending: dict[BatchKey, _Pending] = {}
        self._tasks: set[asyncio.Task[None]] = set()

    def configure(self, *, batch_messages: int, idle_seconds: float) -> None:
        self.batch_messages = batch_messages
        self.idle_seconds = idle_seconds

    def waiting(self, key: BatchKey) -> int:
        """Unprocessed turns of ``key`` (not counting a running extraction's)."""
        pending = self._pending.get(key)
        return len(pending.turns) if pending else 0

    def add(self, key: BatchKey, turn: Turn) -> None:
        """Queue one answered turn; start an extraction when the batch is full."""
        pending = self._pending.setdefault(key, _Pending())
        pending.turns.append(turn)
        self._arm(key, pending)

    def _fresh(self, pending: _Pending) -> int:
        return sum(1 for t in pending.turns if not t.retried)

    def _arm(self, key: BatchKey, pending: _Pending) -> None:
        if pending.timer is not None:
            pending.timer.cancel()
            pending.timer = None
        if pending.running or not pending.turns:
            return
        if self._fresh(pending) >= self.batch_messages:
            self._start(key)
            return
        loop = asyncio.get_running_loop()
        pending.timer = loop.call_later(self.idle_seconds, self._start, key)

    def _start(self, key: BatchKey) -> None:
        pending = self._pending.get(key)
        if pending is None or pending.running or not pending.turns:
            return
        if pending.timer is not None:
            pending.timer.cancel()
            pending.timer = None
        batch = Batch(key, pending.turns)
        pending.turns = []
        pending.running = True
        task = asyncio.get_running_loop().create_task(self._run(batch))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _run(self, batch: Batch) -> None:
        ok = False
        try:
            ok = await self.run(batch)
        except Exception as exc:  # never let a background task die silently
            logger.warning(f"[Memory] 主动记忆提取失败：{exc.__class__.__name__}: {exc}")
        finally:
            pending = self._pending.setdefault(batch.key, _Pending())
            pending.running = False
            if not ok:
                again = [Turn(t.text, t.reply, retried=True) for t in batch.turns if not t.retried]
                dropped = len(batch.turns) - len(again)
                if dropped:
                    logger.info(f"[Memory] 主动记忆：{dropped} 条消息第二次提取仍失败，已放弃")
                pending.turns = again + pending.turns
            if pending.turns and (self._fresh(pending) or ok):
                self._arm(batch.key, pending)
            elif not pending.turns:
                self._pending.pop(batch.key, None)

    def forget(self, user_id: str) -> int:
        """Drop every unprocessed turn of ``user_id`` (opt-out); how many were dropped."""
        dropped = 0
        for key in [k for k in self._pending if k.user_id == user_id]:
            pending = self._pending[key]
            if pending.timer is not None:
                pending.timer.cancel()
            dropped += len(pending.turns)
            if pending.running:
                pending.turns = []
            else:
                del self._pending[key]
        return dropped

    async def flush(self) -> None:
        """Start every waiting batch now and wait for all extractions (tests, shutdown)."""
        while True:
            for key, pending in list(self._pending.items()):
                if (
                    pending.turns
                    and not pending.running
                    and any(not t.retried for t in pending.turns)
                ):
                    self._start(key)
            if not self._tasks:
                return
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    async def drain(self) -> None:
        """Wait for the extractions started so far."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    async def close(self) -> None:
        for pending in self._pending.values():
            if pending.timer is not None:
                pending.timer.cancel()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*list(self._tasks), return_exceptions=True)
        self._pending.clear()

    def pending_of(self, user_id: str) -> list[dict[str, str]]:
        """The queued, not yet extracted turns of ``user_id`` (a user's export)."""
        return [
            {"text": turn.text, "reply": turn.reply, "origin": key.origin}
            for key, pending in self._pending.items()
            if key.user_id == user_id
            for turn in pending.turns
        ]
