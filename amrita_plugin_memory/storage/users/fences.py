"""Fences of background work: a forget or an opt-out (in any process) voids work on what
the user said before it.

A forget or an opt-out is a point in time. Background work for a user (an
extraction batch, a persona extraction) takes a
:class:`~...infra.fences.Ticket` whose time is when the user said what the work
reads (the oldest turn of a batch, the oldest window message of a member),
not when the work started; :meth:`UserFences.fence` turns it into the check a
store awaits under the partition's lock right before it writes
(``WriteRules.fence`` of ``MemoryStore.write``). The check fails when, since the ticket's time:

* this process voided it (a forget, ``/memory auto off``: :class:`UserEpochs`);
* any process forgot the user (the tombstone is at or after the ticket's time);
* any process recorded an opt-out of that kind of work (:class:`VoidPoints`:
  ``/memory auto off`` for active memory, ``/memory persona off`` for personas),
  even if the user switched it on again later;
* an extra condition of the caller no longer holds (active memory: consent).

:meth:`UserFences.void_points` gives the same points for inputs not yet used:
queued turns and window messages said at or before a user's point are dropped
before any request is built (their text reaches no model).
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Iterable
from typing import Any, Literal

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError

from ...core.errors import WriteFenced
from ...core.protocols import Fence
from ...infra.fences import Ticket, UserEpochs
from ..shared.sessions import SessionFactory, SharedWork
from .tombstones import ForgottenUsers

__all__ = ["UserFences", "VoidKind", "VoidPoints"]

Condition = Callable[[str], Awaitable[bool]]
"""``user_id -> still allowed?`` (e.g. active memory's consent)."""

VoidKind = Literal["active", "persona"]
"""Which learning an opt-out stops: active memory's (``/memory auto off``), personas'."""


def _us(seconds: float) -> int:
    return int(seconds * 1_000_000)


class VoidPoints:
    """When each user last switched some learning off: rows of the shared database
    (:class:`~..models.UserVoid`), so every process honours an opt-out made anywhere.
    Each operation is waited for at most the bound of ``work`` (:class:`SharedWork`):
    past it an opt-out is refused and a fence voids the work it guards
    (:class:`~..shared.sessions.SharedDatabaseError`), rather than wait without end."""

    def __init__(self, sessions: SessionFactory | None, work: SharedWork | None = None) -> None:
        self.sessions = sessions
        self.work = work or SharedWork()

    async def record(self, user_id: str, kind: VoidKind, at: float) -> None:
        """Record (or move forward) the opt-out of ``kind`` of ``user_id`` at ``at`` (seconds)."""
        if self.sessions is None:
            return
        await self.work.run(self._record(self.sessions, user_id, kind, at), "写入学习开关记录")

    @staticmethod
    async def _record(sessions: SessionFactory, user_id: str, kind: VoidKind, at: float) -> None:
        from ..models import UserVoid  # lazily: importable without NoneBot

        for _ in range(3):
            try:
                async with sessions() as session:
                    row = await session.get(UserVoid, (user_id, kind))
                    if row is None:
                        session.add(UserVoid(user_id=user_id, kind=kind, at_us=_us(at)))
                    elif row.at_us < _us(at):
                        row.at_us = _us(at)
                    await session.commit()
                return
            except IntegrityError:  # inserted by another process meanwhile: read it again
                continue

    async def of(self, user_ids: Iterable[str], kind: VoidKind) -> dict[str, float]:
        """The recorded opt-out of ``kind`` of each of ``user_ids`` that has one (seconds)."""
        wanted = sorted(set(user_ids))
        if self.sessions is None or not wanted:
            return {}
        from ..models import UserVoid  # lazily: importable without NoneBot

        stmt = select(UserVoid.user_id, UserVoid.at_us).where(
            UserVoid.kind == kind, UserVoid.user_id.in_(wanted)
        )
        return await self.work.run(self._read(self.sessions, stmt), "读取学习开关记录")

    @staticmethod
    async def _read(sessions: SessionFactory, stmt: Any) -> dict[str, float]:
        async with sessions() as session:
            rows = (await session.execute(stmt)).all()
        return {str(user_id): int(at_us) / 1_000_000 for user_id, at_us in map(tuple, rows)}


class UserFences:
    """The epochs of this process, the tombstones and the opt-outs of all, as one check."""

    def __init__(
        self,
        epochs: UserEpochs,
        forgotten: ForgottenUsers | None,
        voids: VoidPoints | None = None,
    ) -> None:
        self.epochs = epochs
        self.forgotten = forgotten
        self.voids = voids or VoidPoints(None)

    def ticket(self, user_id: str, at: float | None = None) -> Ticket:
        """A ticket of ``user_id`` for input said at ``at`` (seconds; now by default)."""
        ticket = self.epochs.ticket(user_id)
        return ticket if at is None else Ticket(user_id, ticket.epoch, at)

    def snapshot(self) -> Callable[[str], Ticket]:
        return self.epochs.snapshot()

    async def void_points(
        self, user_ids: Iterable[str], kind: VoidKind | None = None
    ) -> dict[str, float]:
        """For each of ``user_ids`` with one: the latest point (seconds since the epoch) at
        or before which what they said is void for background work of ``kind``: their
        last forget in any process and, with ``kind``, their last opt-out of it."""
        users = set(user_ids)
        points: dict[str, float] = {}
        if self.forgotten is not None and users:  # keyed: these users' rows only
            for user_id, at in (await self.forgotten.of(users)).items():
                points[user_id] = at.timestamp()
        if kind is not None:
            for user_id, at in (await self.voids.of(users, kind)).items():
                points[user_id] = max(points.get(user_id, at), at)
        return points

    async def void(self, user_id: str, kind: VoidKind) -> None:
        """An opt-out of ``kind`` now: void this process's tickets of ``user_id`` and record
        the point for every process."""
        self.epochs.bump(user_id)
        await self.voids.record(user_id, kind, time.time())

    async def check(
        self, ticket: Ticket, also: Condition | None = None, kind: VoidKind | None = None
    ) -> None:
        """Raise :class:`WriteFenced` when ``ticket`` was voided (see the module docstring)."""
        if not self.epochs.valid(ticket):
            raise WriteFenced(ticket.user_id, "用户已遗忘数据或关闭了自动记忆")
        if self.forgotten is not None:
            at = await self.forgotten.forgotten_at(ticket.user_id)
            if at is not None and at.timestamp() >= ticket.taken_at:
                raise WriteFenced(ticket.user_id, "用户的数据已被遗忘")
        if kind is not None:
            off = (await self.voids.of([ticket.user_id], kind)).get(ticket.user_id)
            if off is not None and off >= ticket.taken_at:
                raise WriteFenced(ticket.user_id, "用户关闭过学习，此前说的话不再学习")
        if also is not None and not await also(ticket.user_id):
            raise WriteFenced(ticket.user_id, "用户关闭了自动记忆")

    def fence(
        self, ticket: Ticket, also: Condition | None = None, kind: VoidKind | None = None
    ) -> Fence:
        """The check of ``ticket`` as a store's ``fence`` argument."""

        async def check() -> None:
            await self.check(ticket, also, kind)

        return check
