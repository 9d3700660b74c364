"""Per-group facts: the anonymisation switch and the members' fixed labels, and so
how members are named in one group's blocks (:meth:`GroupDirectory.member_labels`).

Both are read in every group turn, so both are cached in memory after the
first read of a group; writes go to SQLite first and then to the cache.

The anonymisation switch has one home, its table row: in remote mode
(:meth:`GroupDirectory.share`) a change commits a change-feed row
(``setting:group:<id>``) in its own transaction and every other process drops
that group's cached switch when it sees it, so ``/memory group anonymize on``
through one bot takes effect in every bot within a second (a failed poll drops
every cached switch). A switch that cannot be read raises: the group hooks
then leave the group's blocks out, so no nickname goes out unasked.
A label is given once (:func:`~...prompting.labels.make_label` against the labels
the group already uses) and stored, so a member keeps it across restarts.

Several bots may serve one group from one database: a label is unique within
its group by a unique index (``GroupMemberLabel``), not by this process's
cache. A member missing from the cache makes the group's labels be read again
first, and a new label is inserted alone: when another process took that label
(or labelled that member) meanwhile, the insert fails, the group's labels are
read again and the member gets the next free label (or the one given there).

Every operation's database work (with the group's lock it takes) is waited for at most
the bound of the directory's :class:`~..shared.sessions.SharedWork` (local mode too);
past it the caller gets a :class:`~..shared.sessions.SharedDatabaseError` and the work
ends by itself, never cancelled half-way between its insert and its cache.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from sqlalchemy import delete, select
from sqlalchemy.exc import IntegrityError

from ...core.config import GroupContextConfig
from ...infra.locks import PartitionLocks
from ...prompting.group_window import WindowEntry
from ...prompting.labels import make_label, named_label
from ..models import GroupMemberLabel, GroupSetting, db_now
from ..scope import GroupView
from ..shared.coherence import SAFETY_EXPIRY, Coherence, setting_of, setting_row
from ..shared.keyed import KeyedCache
from ..shared.sessions import SharedWork, orm_session

__all__ = ["LABEL_ATTEMPTS", "GroupDirectory"]

LABEL_ATTEMPTS = 8
"""New labels tried for one member when other processes keep taking them first."""

KIND = "group"
"""The setting kind of a group's feed rows (its anonymisation switch)."""


class _Labels:
    __slots__ = ("by_user", "taken")

    def __init__(self) -> None:
        self.by_user: dict[str, str] = {}
        self.taken: set[str] = set()

    def add(self, user_id: str, label: str) -> None:
        self.by_user[user_id] = label
        self.taken.add(label)


async def _read_switch(group_id: str) -> bool | None:
    async with orm_session() as session:
        row = await session.get(GroupSetting, group_id)
        return row.anonymize if row is not None else None


class GroupDirectory:
    """Anonymisation switches and member labels of every group."""

    def __init__(self, config: GroupContextConfig, *, work: SharedWork | None = None) -> None:
        self.config = config
        self.work = work or SharedWork()
        """Bounds every operation's wait on the tables (the runtime's one instance)."""
        self._anonymize: KeyedCache[tuple[bool | None]] = KeyedCache(4096)
        """The group's own switch; ``(None,)``: follow ``[group_context] anonymize``."""
        self._labels: dict[str, _Labels] = {}
        self._locks = PartitionLocks()
        self.coherence = Coherence(GroupSetting.__tablename__)
        """The process's change feed in remote mode (:meth:`share`); inactive otherwise."""

    def share(self, coherence: Coherence) -> None:
        """Follow other processes' changes of the switches (remote mode)."""
        self.coherence = coherence
        coherence.follow_with(self._changed_elsewhere, self._anonymize.clear)
        self._anonymize.ttl = SAFETY_EXPIRY

    def _changed_elsewhere(self, row: str) -> None:
        group_id = setting_of(row, KIND)
        if group_id is not None:
            self._anonymize.invalidate(group_id)

    # -- anonymisation --------------------------------------------------------------

    async def anonymize(self, group_id: str) -> bool:
        """Whether the group's blocks show labels (``True``) or nicknames."""
        await self.coherence.fresh()
        cached = self._anonymize.get(group_id)
        if cached is None:
            generation = self._anonymize.generation
            cached = (await self.work.run(_read_switch(group_id), "读取群设置"),)
            self._anonymize.put(group_id, cached, since=generation)
        own = cached[0]
        return self.config.anonymize if own is None else own

    async def set_anonymize(self, group_id: str, value: bool) -> None:
        await self.work.run(self._set_switch(group_id, value), "修改群设置")

    async def _set_switch(self, group_id: str, value: bool) -> None:
        async with self._locks.hold(f"setting:{group_id}"):
            await self._write_switch(group_id, value)
            self._anonymize.written(group_id, (value,))

    async def _write_switch(self, group_id: str, value: bool) -> None:
        async with orm_session() as session:
            row = await session.get(GroupSetting, group_id)
            if row is None:
                session.add(GroupSetting(group_id=group_id, anonymize=value, updated_at=db_now()))
            else:
                row.anonymize = value
                row.updated_at = db_now()
            await self.coherence.note(session, [setting_row(KIND, group_id)])
            await session.commit()

    # -- labels --------------------------------------------------------------------------

    async def labels(self, group_id: str, user_ids: Iterable[str]) -> dict[str, str]:
        """The label of each of ``user_ids`` in the group, giving (and storing) new ones."""
        wanted = list(dict.fromkeys(user_ids))
        known = self._labels.get(group_id)
        if known is not None and all(u in known.by_user for u in wanted):
            return {u: known.by_user[u] for u in wanted}
        return await self.work.run(self._assign(group_id, wanted), "分配群成员代号")

    async def _assign(self, group_id: str, wanted: list[str]) -> dict[str, str]:
        async with self._locks.hold(f"labels:{group_id}"):
            # Another process may have labelled members since this one read the group.
            known = await self._load(group_id)
            for user_id in wanted:
                if user_id not in known.by_user:
                    known = await self._give(group_id, user_id, known)
            return {u: known.by_user[u] for u in wanted}

    async def _give(self, group_id: str, user_id: str, known: _Labels) -> _Labels:
        """Store a new label of ``user_id``; the group's labels as they are afterwards."""
        for _ in range(LABEL_ATTEMPTS):
            label = make_label(user_id, known.taken)
            try:
                async with orm_session() as session:
                    session.add(GroupMemberLabel(group_id=group_id, user_id=user_id, label=label))
                    await session.commit()
            except IntegrityError:
                # Taken (or this member labelled) by another process meanwhile: read again.
                known = await self._load(group_id)
                if user_id in known.by_user:
                    return known
                continue
            except Exception:
                self._labels.pop(group_id, None)  # re-read next time: never two labels
                raise
            known.add(user_id, label)
            return known
        self._labels.pop(group_id, None)
        raise RuntimeError(f"群 {group_id} 的成员代号分配冲突过多，稍后重试")

    async def member_labels(
        self,
        view: GroupView,
        entries: Sequence[WindowEntry],
        extra: Iterable[tuple[str, str]],
    ) -> dict[str, str]:
        """How ``view``'s group's blocks name every member in ``entries`` and in ``extra``
        (``(user_id, nickname)``). A turn's group view, never a bare group id (issue #49):
        the labels say who is in which group.

        Anonymised (the default): ``用户_`` + the id's last digits, fixed per
        member (:meth:`labels`). Otherwise the nickname seen last, followed by the id.
        """
        group_id = GroupView.check(view).group_id
        extra = list(extra)
        if await self.anonymize(group_id):
            members = [u for u, _ in extra] + [e.user_id for e in entries if not e.is_bot]
            return await self.labels(group_id, members)
        names: dict[str, str] = {}
        for entry in entries:
            if not entry.is_bot:
                names[entry.user_id] = entry.nickname
        for user_id, nickname in extra:
            names[user_id] = nickname or names.get(user_id, "")
        return {u: named_label(n, u) for u, n in names.items()}

    async def _load(self, group_id: str) -> _Labels:
        known = _Labels()
        stmt = select(GroupMemberLabel).where(GroupMemberLabel.group_id == group_id)
        async with orm_session() as session:
            for row in (await session.scalars(stmt)).all():
                known.add(row.user_id, row.label)
        self._labels[group_id] = known
        return known

    # -- one member (a user's export and forget) ----------------------------------------

    async def labels_of(self, user_id: str) -> dict[str, str]:
        """The label of member ``user_id`` in every group that gave one: ``{group id: label}``."""
        return await self.work.run(_labels_of(user_id), "读取群成员代号")

    def drop_user(self, user_id: str) -> None:
        """Forget the cached labels of every group that named ``user_id`` (their forget
        through another process; the groups' labels are read again on next use)."""
        for group_id in [g for g, known in self._labels.items() if user_id in known.by_user]:
            del self._labels[group_id]

    async def forget_user(self, user_id: str) -> int:
        """Delete member ``user_id``'s label in every group; how many. Speaking again
        later gives them a label anew (possibly another one)."""
        return await self.work.run(self._unlabel(user_id), "删除群成员代号")

    async def _unlabel(self, user_id: str) -> int:
        removed = 0
        for group_id in await _labels_of(user_id):
            async with self._locks.hold(f"labels:{group_id}"):
                async with orm_session() as session:
                    result = await session.execute(
                        delete(GroupMemberLabel).where(
                            GroupMemberLabel.group_id == group_id,
                            GroupMemberLabel.user_id == user_id,
                        )
                    )
                    await session.commit()
                removed += int(getattr(result, "rowcount", 0) or 0)
                self._labels.pop(group_id, None)  # read again on next use
        return removed


async def _labels_of(user_id: str) -> dict[str, str]:
    stmt = select(GroupMemberLabel).where(GroupMemberLabel.user_id == user_id)
    async with orm_session() as session:
        rows = (await session.scalars(stmt)).all()
    return {row.group_id: row.label for row in sorted(rows, key=lambda r: r.group_id)}
