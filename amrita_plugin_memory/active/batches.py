"""Batching a user's answered turns for extraction: by count, after a quiet spell, bounded.

Extraction costs one model request, so it does not run after every message:
a user's unprocessed turns are collected per :class:`BatchKey` (the user's
partition and where they were said) and handed over when there are
``batch_messages`` of them, or ``idle_seconds`` after the last one.

Every part is bounded, so a flood (one user pasting a thousand lines, or
fifty users at once) costs a known amount:

* at most ``max_pending`` turns wait per key: past it the oldest are dropped
  (counted in the log, never their text), and at most :data:`MAX_KEYS` keys
  wait at all;
* one batch takes at most ``max_turns`` turns; the runner may send fewer (to
  keep a request under its character budget) and the rest wait for the next;
* at most ``max_running`` extractions run at once in the process; ready keys
  wait their turn in arrival order;
* a failed extraction's turns are offered once more, in front of the next
  batch (which starts only when new turns arrive); after that they are
  dropped. A runner may also *defer* a batch (the model is known to be
  failing): its turns wait untouched and the key is tried again later.

Every turn records when it was said (:attr:`Turn.at`). A batch carries the
:class:`~..infra.fences.Ticket` of its user at the time of its oldest turn, not
of the moment it left the queue: a forget or an opt-out after that, in this
process or any other, voids it, and then its turns are never queued again,
whatever the runner answers. A runner that finds the batch's first turns said
before such a point says so (:attr:`BatchResult.voided`): they are dropped
unsent, whatever else happens to the batch.
"""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, replace
from typing import NamedTuple

from nonebot import logger

from ..infra.fences import Ticket, UserEpochs

__all__ = ["MAX_KEYS", "Batch", "BatchKey", "BatchQueue", "BatchResult", "QueueStats", "Turn"]

MAX_KEYS = 10_000
"""Keys (user × chat) with waiting turns at most; a turn of another key is dropped."""


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
    bot_id: str = ""
    """The bot that answered (a notice to the user goes through it)."""
    at: float = field(default_factory=time.time)
    """When it was said (wall-clock seconds): a forget or an opt-out at or after this,
    in any process, voids it."""


@dataclass(slots=True)
class Batch:
    key: BatchKey
    turns: list[Turn] = field(default_factory=list)
    ticket: Ticket | None = None
    """The user's epoch when the turns were taken and the time of the oldest turn
    (``None``: never voided, tests)."""


@dataclass(frozen=True, slots=True)
class BatchResult:
    """What a runner did with a batch.

    ``sent``: how many turns (from the front) the request carried; the others
    wait for the next batch as they were. ``deferred``: nothing was tried (the
    model is failing); every turn waits and the key is tried again in
    ``retry_in`` seconds. ``voided``: how many turns from the front were said
    before a forget or an opt-out of the user; they are dropped in every case
    (counted in ``sent`` when the request went out).
    """

    ok: bool
    sent: int
    deferred: bool = False
    retry_in: float = 0.0
    voided: int = 0


Runner = Callable[[Batch], Awaitable[BatchResult]]


@dataclass(slots=True)
class QueueStats:
    """Counters since start: what the flood benchmark and the console report."""

    batches: int = 0
    dropped: int = 0
    """Turns dropped: over a cap, a second failure, or voided by a forget / opt-out."""
    running: int = 0
    peak_running: int = 0


@dataclass(slots=True)
class _Pending:
    turns: list[Turn] = field(default_factory=list)
    timer: asyncio.TimerHandle | None = None
    running: bool = False
    deferred: bool = False
    """Its last batch was deferred: it waits for its timer (a flush does not start it)."""


class BatchQueue:
    """Unprocessed turns per key, and the tasks that extract them."""

    def __init__(
        self,
        run: Runner,
        *,
        batch_messages: int,
        idle_seconds: float,
        max_pending: int = 40,
        max_turns: int = 16,
        max_running: int = 4,
        epochs: UserEpochs | None = None,
    ) -> None:
        self.run = run
        self.epochs = epochs or UserEpochs()
        self.stats = QueueStats()
        self.configure(
            batch_messages=batch_messages,
            idle_seconds=idle_seconds,
            max_pending=max_pending,
            max_turns=max_turns,
            max_running=max_running,
        )
        self._pending: dict[BatchKey, _Pending] = {}
        self._ready: OrderedDict[BatchKey, None] = OrderedDict()
        self._tasks: set[asyncio.Task[None]] = set()

    def configure(
        self,
        *,
        batch_messages: int,
        idle_seconds: float,
        max_pending: int = 40,
        max_turns: int = 16,
        max_running: int = 4,
    ) -> None:
        self.batch_messages = batch_messages
        self.idle_seconds = idle_seconds
        self.max_pending = max(1, max_pending)
        self.max_turns = max(1, max_turns)
        self.max_running = max(1, max_running)

    def waiting(self, key: BatchKey) -> int:
        """Unprocessed turns of ``key`` (not counting a running extraction's)."""
        pending = self._pending.get(key)
        return len(pending.turns) if pending else 0

    def pending_of(self, user_id: str) -> list[dict[str, str]]:
        """The unprocessed turns of ``user_id`` (their export)."""
        return [
            {"origin": key.origin, "text": t.text, "reply": t.reply}
            for key, pending in self._pending.items()
            if key.user_id == user_id
            for t in pending.turns
        ]

    def _drop(self, count: int, why: str) -> None:
        if count > 0:
            self.stats.dropped += count
            logger.info(f"[Memory] 主动记忆：{count} 条待提取消息已丢弃（{why}）")

    def add(self, key: BatchKey, turn: Turn) -> bool:
        """Queue one answered turn; start an extraction when the batch is full.

        ``False`` when the turn was dropped (too many users waiting)."""
        pending = self._pending.get(key)
        if pending is None:
            if len(self._pending) >= MAX_KEYS:
                self._drop(1, f"等待提取的会话已达 {MAX_KEYS} 个")
                return False
            pending = self._pending[key] = _Pending()
        pending.turns.append(turn)
        excess = len(pending.turns) - self.max_pending
        if excess > 0:
            del pending.turns[:excess]
            self._drop(excess, f"该用户待提取的消息超过 {self.max_pending} 条，丢弃最早的")
        self._arm(key, pending)
        return True

    def _fresh(self, pending: _Pending) -> int:
        return sum(1 for t in pending.turns if not t.retried)

    def _arm(self, key: BatchKey, pending: _Pending, delay: float | None = None) -> None:
        if pending.timer is not None:
            pending.timer.cancel()
            pending.timer = None
        if pending.running or not pending.turns or key in self._ready:
            return
        if delay is None and self._fresh(pending) >= self.batch_messages:
            self._enqueue(key)
            return
        loop = asyncio.get_running_loop()
        wait = self.idle_seconds if delay is None else delay
        pending.timer = loop.call_later(wait, self._enqueue, key)

    def _enqueue(self, key: BatchKey) -> None:
        """``key`` is ready: start it now, or as soon as a running extraction ends."""
        pending = self._pending.get(key)
        if pending is None or pending.running or not pending.turns:
            return
        if pending.timer is not None:
            pending.timer.cancel()
            pending.timer = None
        self._ready[key] = None
        self._start_ready()

    def _start_ready(self) -> None:
        while self._ready and self.stats.running < self.max_running:
            key, _ = self._ready.popitem(last=False)
            pending = self._pending.get(key)
            if pending is None or pending.running or not pending.turns:
                continue
            self._start(key, pending)

    def _start(self, key: BatchKey, pending: _Pending) -> None:
        pending.deferred = False
        turns = pending.turns[: self.max_turns]
        ticket = self.epochs.ticket(key.user_id)
        ticket = Ticket(ticket.user_id, ticket.epoch, min(t.at for t in turns))
        batch = Batch(key, turns, ticket)
        pending.turns = pending.turns[self.max_turns :]
        pending.running = True
        self.stats.batches += 1
        self.stats.running += 1
        self.stats.peak_running = max(self.stats.peak_running, self.stats.running)
        task = asyncio.get_running_loop().create_task(self._run(batch))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _run(self, batch: Batch) -> None:
        result = BatchResult(ok=False, sent=len(batch.turns))
        try:
            result = await self.run(batch)
        except Exception as exc:  # never let a background task die silently
            logger.warning(f"[Memory] 主动记忆提取失败：{exc.__class__.__name__}: {exc}")
        finally:
            self.stats.running -= 1
            self._finish(batch, result)
            self._start_ready()

    def _finish(self, batch: Batch, result: BatchResult) -> None:
        key = batch.key
        pending = self._pending.get(key)
        if batch.ticket is not None and not self.epochs.valid(batch.ticket):
            # Forgotten or opted out meanwhile: nothing of this batch comes back.
            self._drop(len(batch.turns), "用户已遗忘数据或关闭主动记忆")
            if pending is not None:
                pending.running = False
                if not pending.turns:
                    self._pending.pop(key, None)
                else:
                    self._arm(key, pending)
            return
        if pending is None:
            pending = self._pending[key] = _Pending()
        pending.running = False
        voided = max(0, min(result.voided, len(batch.turns)))
        if voided:
            self._drop(voided, "用户在这些消息之后遗忘了数据或关闭了自动记忆")
        turns = batch.turns[voided:]
        sent = max(0, min(result.sent - voided, len(turns)))
        unsent = turns[sent:]
        if result.deferred:
            pending.turns = turns + pending.turns
            self._trim(pending)
            pending.deferred = True
            self._arm(key, pending, delay=max(1.0, result.retry_in))
            return
        again: list[Turn] = []
        if not result.ok:
            again = [replace(t, retried=True) for t in turns[:sent] if not t.retried]
            self._drop(sent - len(again), "第二次提取仍失败，已放弃")
        pending.turns = again + unsent + pending.turns
        self._trim(pending)
        if not pending.turns:
            self._pending.pop(key, None)
        elif result.ok and unsent:
            self._enqueue(key)  # the budget split a full batch: go on with the rest
        elif self._fresh(pending) or result.ok:
            self._arm(key, pending)

    def _trim(self, pending: _Pending) -> None:
        excess = len(pending.turns) - self.max_pending
        if excess > 0:
            del pending.turns[:excess]
            self._drop(excess, f"该用户待提取的消息超过 {self.max_pending} 条，丢弃最早的")

    def forget(self, user_id: str) -> int:
        """Drop every unprocessed turn of ``user_id`` and void its running batches
        (a forget, an opt-out); how many waiting turns were dropped."""
        self.epochs.bump(user_id)
        dropped = 0
        for key in [k for k in self._pending if k.user_id == user_id]:
            pending = self._pending[key]
            if pending.timer is not None:
                pending.timer.cancel()
                pending.timer = None
            self._ready.pop(key, None)
            dropped += len(pending.turns)
            if pending.running:
                pending.turns = []
            else:
                del self._pending[key]
        return dropped

    def drop_said_before(self, user_id: str, at: float) -> int:
        """Drop the waiting turns of ``user_id`` said at or before ``at`` (a forget through
        another process: what it voids leaves this process's memory); how many."""
        dropped = 0
        for key in [k for k in self._pending if k.user_id == user_id]:
            pending = self._pending[key]
            keep = [t for t in pending.turns if t.at > at]
            dropped += len(pending.turns) - len(keep)
            pending.turns = keep
            if not keep and not pending.running:
                if pending.timer is not None:
                    pending.timer.cancel()
                self._ready.pop(key, None)
                del self._pending[key]
        self._drop(dropped, "用户已在另一个进程遗忘数据")
        return dropped

    async def flush(self) -> None:
        """Start every waiting batch now and wait for all extractions (tests, shutdown)."""
        while True:
            for key, pending in list(self._pending.items()):
                if (
                    pending.turns
                    and not pending.running
                    and not pending.deferred
                    and self._fresh(pending)
                ):
                    self._enqueue(key)
            if not self._tasks:
                return
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    async def drain(self) -> None:
        """Wait for the extractions started so far (and those they let start)."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    async def close(self) -> None:
        for pending in self._pending.values():
            if pending.timer is not None:
                pending.timer.cancel()
        self._ready.clear()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*list(self._tasks), return_exceptions=True)
        self._pending.clear()
