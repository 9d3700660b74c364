"""Fences of background work: a forget (in any process) or an opt-out voids work in flight.

A :class:`~...infra.fences.Ticket` is taken when background work takes its
input (an extraction batch, a persona extraction); :meth:`UserFences.fence`
turns it into the check a store awaits under the partition's lock right
before it writes (``WriteRules.fence`` of ``MemoryStore.write``). The check fails when, since
the ticket was taken:

* this process voided it (a forget, ``/memory auto off``: :class:`UserEpochs`);
* any process forgot the user (the tombstone is newer than the ticket);
* an extra condition of the caller no longer holds (active memory: consent).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from ...core.errors import WriteFenced
from ...core.protocols import Fence
from ...infra.fences import Ticket, UserEpochs
from .tombstones import ForgottenUsers

__all__ = ["UserFences"]

Condition = Callable[[str], Awaitable[bool]]
"""``user_id -> still allowed?`` (e.g. active memory's consent)."""


class UserFences:
    """The epochs of this process and the tombstones of all, as one check."""

    def __init__(self, epochs: UserEpochs, forgotten: ForgottenUsers | None) -> None:
        self.epochs = epochs
        self.forgotten = forgotten

    def ticket(self, user_id: str) -> Ticket:
        return self.epochs.ticket(user_id)

    def snapshot(self) -> Callable[[str], Ticket]:
        return self.epochs.snapshot()

    async def check(self, ticket: Ticket, also: Condition | None = None) -> None:
        """Raise :class:`WriteFenced` when ``ticket`` was voided (see the module docstring)."""
        if not self.epochs.valid(ticket):
            raise WriteFenced(ticket.user_id, "用户已遗忘数据或关闭了自动记忆")
        if self.forgotten is not None:
            at = await self.forgotten.forgotten_at(ticket.user_id)
            if at is not None and at.timestamp() >= ticket.taken_at:
                raise WriteFenced(ticket.user_id, "用户的数据已被遗忘")
        if also is not None and not await also(ticket.user_id):
            raise WriteFenced(ticket.user_id, "用户关闭了自动记忆")

    def fence(self, ticket: Ticket, also: Condition | None = None) -> Fence:
        """The check of ``ticket`` as a store's ``fence`` argument."""

        async def check() -> None:
            await self.check(ticket, also)

        return check
