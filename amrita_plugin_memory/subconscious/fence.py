"""Keeping a forgotten target user's data out of the L3 loop: the fence a forget closes.

A user's forget (``upkeep.users.user_data.UserData.forget``) enters
:meth:`SubconsciousRunner.forgetting <.runner.SubconsciousRunner.forgetting>`
before it removes anything. For the loop's target user that cancels the
planned cycle, asks the running one to stop (like a message of the user does)
and closes this fence until the forget ends:

* every tool call of the loop passes the fence (:meth:`CycleFence.tool_call`):
  a call of a cycle that began before the forget (its ``epoch`` is older than
  the fence's), or any call while a forget is in progress, is refused without
  running, so nothing of it is written;
* the forget first waits until the tool calls already running have ended: what
  they wrote is written *before* the forget removes the user's data, and goes
  with it;
* no cycle starts while a forget is in progress, and a fenced cycle keeps no
  abstract (:meth:`CycleFence.open_for`).

Why a fence and not a cancelled task: a cancelled tool call may already have
handed its write to Chroma (a worker thread that runs on) or to the profile's
file, and it would land after the removal; Core's agent also catches what its
tools raise. Counting the calls in flight and waiting for them makes the order
certain: every write of the old cycle happens before the removal, or never.
A call that does not end within :attr:`CycleFence.wait_seconds` makes the
forget stop with :class:`~..upkeep.users.user_data.ForgetBlocked` (run it again).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from ..upkeep.users.user_data import ForgetBlocked
from .types import Cycle

__all__ = ["FORGET_WAIT_SECONDS", "CycleFence"]

FORGET_WAIT_SECONDS = 60.0
"""How long a forget waits for the loop's running tool calls (an embedding or a
model call each, bounded by their own timeouts)."""


class CycleFence:
    """The loop's forget epoch, the forgets in progress and the tool calls in flight."""

    def __init__(self, *, wait_seconds: float = FORGET_WAIT_SECONDS) -> None:
        self.epoch = 0
        """Moved on by every forget of the target user; a cycle keeps the one it began in."""
        self.forgets = 0
        """Forgets of the target user in progress (no cycle starts, no tool call runs)."""
        self.wait_seconds = wait_seconds
        self._calls = 0
        self._idle = asyncio.Event()
        self._idle.set()

    def open_for(self, cycle: Cycle | None) -> bool:
        """Whether ``cycle`` (``None``: a call outside any cycle) may still write."""
        if self.forgets:
            return False
        return cycle is None or cycle.epoch == self.epoch

    @asynccontextmanager
    async def tool_call(self, cycle: Cycle | None) -> AsyncIterator[bool]:
        """One tool call: yields whether it may run, and counts it while it does."""
        if not self.open_for(cycle):
            yield False
            return
        self._calls += 1
        self._idle.clear()
        try:
            yield True
        finally:
            self._calls -= 1
            if not self._calls:
                self._idle.set()

    @asynccontextmanager
    async def closed(self) -> AsyncIterator[None]:
        """Close the fence for a forget: no new call, the running ones waited for."""
        self.epoch += 1
        self.forgets += 1
        try:
            try:
                await asyncio.wait_for(self._idle.wait(), self.wait_seconds)
            except TimeoutError:
                raise ForgetBlocked(
                    f"L3 循环的工具调用在 {self.wait_seconds:g} 秒内没有结束，"
                    "遗忘暂停在这里（遗忘记录已写入），请稍后重试"
                ) from None
            yield
        finally:
            self.forgets -= 1
