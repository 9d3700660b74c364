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

That much holds in this process. A forget through another process (another
bot on the same store) is seen through the shared tombstones
(``storage/users/tombstones``): every tool call, every write of a memory or
memo (the loop's scope carries :meth:`CycleFence.check` as its fence, run
inside the store's write section), a message about to be sent and the
cycle's abstract first ask whether the target user was forgotten at or after
the cycle began (:meth:`CycleFence.may_act`), and what the cycle adds to the
loop's state is buried by that forget anyway (``storage/users/loop_state_row``).

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
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from datetime import datetime

from nonebot import logger

from ..core.errors import WriteFenced
from ..upkeep.users.user_data import ForgetBlocked
from .types import Cycle

ForgottenAt = Callable[[], Awaitable[datetime | None]]
"""When the target user was last forgotten, in any process (``None``: never)."""

__all__ = ["FORGET_WAIT_SECONDS", "CycleFence"]

FORGET_WAIT_SECONDS = 60.0
"""How long a forget waits for the loop's running tool calls (an embedding or a
model call each, bounded by their own timeouts)."""


class CycleFence:
    """The loop's forget epoch, the forgets in progress and the tool calls in flight."""

    def __init__(
        self,
        *,
        wait_seconds: float = FORGET_WAIT_SECONDS,
        forgotten_at: ForgottenAt | None = None,
        target: str = "",
    ) -> None:
        self.forgotten_at = forgotten_at
        """The shared tombstone of the target user (``None``: this process only)."""
        self.target = target
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

    async def may_act(self, cycle: Cycle | None) -> bool:
        """:meth:`open_for`, and no process forgot the target user since ``cycle`` began.

        A tombstone that cannot be read counts as a forget (refused, logged)."""
        if not self.open_for(cycle):
            return False
        if cycle is None or self.forgotten_at is None:
            return True
        try:
            at = await self.forgotten_at()
        except Exception as exc:
            logger.warning(f"[Subconscious] 读取遗忘记录失败，本次操作未执行：{exc}")
            return False
        return at is None or at.timestamp() < cycle.started_at

    async def check(self, cycle: Cycle | None) -> None:
        """:meth:`may_act` as a store's fence: raises :class:`WriteFenced` when not."""
        if not await self.may_act(cycle):
            raise WriteFenced(self.target, "L3 循环的目标用户已被遗忘")

    @asynccontextmanager
    async def tool_call(self, cycle: Cycle | None) -> AsyncIterator[bool]:
        """One tool call: yields whether it may run, and counts it while it does."""
        # open_for again after the await: a forget here may have closed the fence meanwhile.
        if not await self.may_act(cycle) or not self.open_for(cycle):
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
