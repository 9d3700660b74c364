"""The L3 loop's stored state, one row per item, and what it keeps about one user.

The state is a JSON document to the loop (``subconscious.types.StateData``):
``total_runs``, the messages waiting for the target user, the abstracts of the
last cycles and the knowledge suggestions. It is stored as one row per item
(:class:`~..models.LoopItem`) beside a ``{"total_runs": n}`` row
(:class:`~..models.SubconsciousState`), and :meth:`LoopStateRow.edit` writes
only what its change changed: the items it added, removed or rewrote, and
``total_runs`` moved forward. So a process whose loop holds an older copy never
writes back items another process erased (a user's forget through another
bot), and two processes adding items at once both keep theirs.

Every item records whose it is and when the work that made it began
(``since``); a read first deletes the items of users forgotten at or after
that time (the shared tombstones, ``storage/users/tombstones``). An item a
cycle begun before a forget adds after it (in another process, whose cycle
had not heard of the forget yet) is therefore never read, delivered or
exported: it is deleted by the next read.

The loop (``subconscious.state.LoopState``) and :class:`LoopStateRow` (a
process without the loop: the command line, a second bot) both implement
:class:`LoopStateAccess`; a user's export and forget (``upkeep/users``) read
and remove, through it, the messages waiting for the loop's target user, the
abstracts of the loop's cycles (each says what a cycle did with the target
user's memories) and the knowledge suggestions a user made.
"""

from __future__ import annotations

import copy
import json
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

from sqlalchemy import delete, func, select, update
from sqlalchemy.exc import IntegrityError

from ..keys import user_key, user_of_key
from ..models import ForgottenUser, LoopItem, SubconsciousState, db_now
from ..scope import UserView
from ..shared.sessions import SharedWork, orm_session

__all__ = [
    "LOOP_STATE_UID",
    "LoopItems",
    "LoopStateAccess",
    "LoopStateRow",
    "drop_user_items",
    "user_items",
]

LOOP_STATE_UID = "amrita_memory"
"""The loop's row in the ``SubconsciousState`` table (and its items' ``loop``)."""

T = TypeVar("T")

PENDING = "pending_messages"
SUGGESTIONS = "knowledge_suggestions"
ABSTRACTS = "last_abstracts"
RUNS = "total_runs"

KINDS: dict[str, str] = {ABSTRACTS: "abstract", PENDING: "pending", SUGGESTIONS: "suggestion"}
"""The document's lists and the ``kind`` of their rows."""


class LoopStateAccess(Protocol):
    """Reading and changing the loop's state document (a plain JSON dict)."""

    async def read(self) -> Mapping[str, Any]: ...

    async def edit(self, change: Callable[[dict[str, Any]], T]) -> T:
        """Apply ``change`` to the document and persist what it changed."""
        ...


def _us(seconds: float) -> int:
    return int(seconds * 1_000_000)


def _runs(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def _keyed(items: Any) -> dict[str, dict[str, Any]]:
    """The items of one list by id (items without a usable id are not stored items)."""
    out: dict[str, dict[str, Any]] = {}
    for item in items if isinstance(items, list) else []:
        if isinstance(item, dict) and isinstance(item.get("id"), str) and item["id"]:
            out[item["id"]] = item
    return out


def _dump(value: Any) -> str:
    return json.dumps(value, sort_keys=True, default=str)


class LoopStateRow:
    """The loop's stored state (see the module docstring), for any process.

    ``target`` is the loop's target user: the owner of the waiting messages and
    abstracts it stores, and of those converted from the old single-document row
    (which name no owner). Without it those items have no owner to bury them.

    Each public operation (:meth:`read`, :meth:`owners`, :meth:`edit`) is waited for
    at most the bound of ``work`` (:class:`SharedWork`): past it the caller gets a
    :class:`~..shared.sessions.SharedDatabaseError` (an edit may still land later).
    """

    def __init__(
        self,
        uid: str = LOOP_STATE_UID,
        *,
        target: str | None = None,
        work: SharedWork | None = None,
    ) -> None:
        self.uid = uid
        self.target = (target or "").strip()
        self.work = work or SharedWork()

    async def _bury(self, session: Any) -> int:
        """Delete the items of users forgotten at or after the item's work began."""
        owner = func.coalesce(func.nullif(LoopItem.user_id, ""), self.target)
        buried = (
            select(ForgottenUser.user_id)
            .where(ForgottenUser.user_id == owner, ForgottenUser.at_us >= LoopItem.since_us)
            .exists()
        )
        result = await session.execute(delete(LoopItem).where(LoopItem.loop == self.uid, buried))
        return int(getattr(result, "rowcount", 0) or 0)

    async def read(self, *, bury: bool = False) -> dict[str, Any]:
        """The document as stored now; ``bury``: the items of users forgotten since their
        work began are deleted first (the loop's own reads; a user's export and forget
        see and count everything stored)."""
        return await self.work.run(self._read(bury), "读取 L3 循环状态")

    async def _read(self, bury: bool) -> dict[str, Any]:
        async with orm_session() as session:
            if bury and await self._bury(session):
                await session.commit()
            state = await session.get(SubconsciousState, self.uid)
            stmt = select(LoopItem).where(LoopItem.loop == self.uid).order_by(LoopItem.seq)
            rows = (await session.scalars(stmt)).all()
        stored = state.data if state is not None and isinstance(state.data, dict) else {}
        if not stored and not rows:
            return {}
        document: dict[str, Any] = {RUNS: _runs(stored.get(RUNS))}
        by_kind = {kind: key for key, kind in KINDS.items()}
        for key in KINDS:
            document[key] = []
        for row in rows:
            key = by_kind.get(row.kind)
            if key is not None and isinstance(row.data, dict):
                document[key].append({**copy.deepcopy(row.data), "id": row.item_id})
        return document

    async def owners(self) -> set[str]:
        """Whose the stored waiting messages and abstracts are (the owner each row records:
        the loop's target user when it was written), whatever this process's config says."""
        stmt = (
            select(LoopItem.user_id)
            .where(
                LoopItem.loop == self.uid,
                LoopItem.kind.in_(("pending", "abstract")),
                LoopItem.user_id != "",
            )
            .distinct()
        )
        return await self.work.run(self._owners(stmt), "读取 L3 循环状态")

    @staticmethod
    async def _owners(stmt: Any) -> set[str]:
        async with orm_session() as session:
            return {str(u) for u in (await session.scalars(stmt)).all()}

    async def edit(
        self,
        change: Callable[[dict[str, Any]], T],
        *,
        since: float | None = None,
        bury: bool = False,
    ) -> T:
        """Apply ``change`` to the document as stored now and write what it changed.

        Items ``change`` added are stored as owned by the target user (waiting
        messages, abstracts) or by who made them (a suggestion's ``user_id``),
        made by work that began at ``since`` (seconds since the epoch; now by
        default). An item added without an ``id`` gets one (in the document too).
        ``bury`` as for :meth:`read`. The read, ``change`` and the write are one bounded
        operation (``change`` must not await).
        """
        began = time.time() if since is None else since
        return await self.work.run(self._edit(change, began, bury), "写入 L3 循环状态")

    async def _edit(self, change: Callable[[dict[str, Any]], T], since: float, bury: bool) -> T:
        document = await self._read(bury)
        before = copy.deepcopy(document)
        result = change(document)
        await self._write(before, document, since)
        return result

    async def _write(self, before: dict[str, Any], after: dict[str, Any], since: float) -> None:
        inserts: list[LoopItem] = []
        deletes: list[tuple[str, str]] = []
        rewrites: list[tuple[str, str, dict[str, Any]]] = []
        for key, kind in KINDS.items():
            old = _keyed(before.get(key))
            listed = after.get(key)
            items: list[Any] = listed if isinstance(listed, list) else []
            new: dict[str, dict[str, Any]] = {}
            for item in items:
                if not isinstance(item, dict):
                    continue
                if not isinstance(item.get("id"), str) or not item["id"]:
                    item["id"] = uuid.uuid4().hex[:12]
                new[item["id"]] = item
            deletes += [(kind, item_id) for item_id in old if item_id not in new]
            for item_id, item in new.items():
                data = {k: v for k, v in item.items() if k != "id"}
                if item_id not in old:
                    owner = str(item.get("user_id") or "") if kind == "suggestion" else self.target
                    inserts.append(
                        LoopItem(
                            loop=self.uid, kind=kind, item_id=item_id, user_id=owner,
                            since_us=_us(since), data=copy.deepcopy(data),
                        )
                    )  # fmt: skip
                elif _dump(data) != _dump({k: v for k, v in old[item_id].items() if k != "id"}):
                    rewrites.append((kind, item_id, copy.deepcopy(data)))
        runs = _runs(after.get(RUNS))
        if not (inserts or deletes or rewrites) and runs <= _runs(before.get(RUNS)):
            return
        async with orm_session() as session:
            await self._change_rows(session, deletes, rewrites, runs)
            session.add_all(inserts)
            try:
                await session.commit()
            except IntegrityError:  # another process stored an item of that id: keep theirs
                await session.rollback()
                await self._write_one_by_one(deletes, rewrites, inserts, runs)

    def _item(self, kind: str, item_id: str) -> tuple[Any, ...]:
        return (LoopItem.loop == self.uid, LoopItem.kind == kind, LoopItem.item_id == item_id)

    async def _change_rows(
        self,
        session: Any,
        deletes: list[tuple[str, str]],
        rewrites: list[tuple[str, str, dict[str, Any]]],
        runs: int,
    ) -> None:
        """The deletes, rewrites and ``total_runs`` of one change, in ``session``."""
        for kind, item_id in deletes:
            await session.execute(delete(LoopItem).where(*self._item(kind, item_id)))
        for kind, item_id, data in rewrites:
            await session.execute(
                update(LoopItem).where(*self._item(kind, item_id)).values(data=data)
            )
        await self._count_runs(session, runs)

    async def _count_runs(self, session: Any, runs: int) -> None:
        """``total_runs`` moved forward only (two processes' counts never go back)."""
        state = await session.get(SubconsciousState, self.uid)
        if state is None:
            session.add(SubconsciousState(uid=self.uid, data={RUNS: runs}, updated_at=db_now()))
        elif runs > _runs((state.data or {}).get(RUNS)) or set(state.data or {}) - {RUNS}:
            stored = _runs((state.data or {}).get(RUNS))
            state.data = {RUNS: max(runs, stored)}  # a new object: the JSON column is dirty
            state.updated_at = db_now()

    async def _write_one_by_one(
        self,
        deletes: list[tuple[str, str]],
        rewrites: list[tuple[str, str, dict[str, Any]]],
        inserts: list[LoopItem],
        runs: int,
    ) -> None:
        async with orm_session() as session:
            await self._change_rows(session, deletes, rewrites, runs)
            await session.commit()
        for row in inserts:
            try:
                async with orm_session() as session:
                    session.add(row)
                    await session.commit()
            except IntegrityError:
                continue


def _suggested_by(item: Any, user_id: str, partition: str) -> bool:
    """A suggestion records who made it (``user_id``); older ones only their chat
    (``source``), which names the user when it was a private chat."""
    if not isinstance(item, Mapping):
        return False
    return item.get("user_id") == user_id or item.get("source") == partition


def _unattributed(item: Any) -> bool:
    """A suggestion that names no submitter: neither a ``user_id`` nor a private chat as its
    ``source`` (those taken over from the published plugin, which recorded neither). It
    may be anyone's: no export shows it, every forget removes it."""
    if not isinstance(item, Mapping) or item.get("user_id"):
        return False
    return user_of_key(str(item.get("source") or "")) is None


@dataclass(slots=True)
class LoopItems:
    """What the loop's state keeps about one user."""

    pending: list[Any] = field(default_factory=list)
    """Messages waiting for the user (only the loop's target user has any)."""
    suggestions: list[Any] = field(default_factory=list)
    """The knowledge suggestions they made."""
    abstracts: list[Any] = field(default_factory=list)
    """What the loop's last cycles did: all about the target user, the one it works on."""


def user_items(state: Mapping[str, Any], view: UserView, *, target: bool) -> LoopItems:
    """The items of the user of ``view`` in ``state``: the waiting messages and the cycles'
    abstracts belong to the loop's target user (``target``) alone, suggestions to who made
    them."""
    user_id = UserView.check(view).user_id
    partition = user_key(user_id)
    suggestions = [s for s in state.get(SUGGESTIONS) or [] if _suggested_by(s, user_id, partition)]
    if not target:
        return LoopItems(suggestions=suggestions)
    return LoopItems(list(state.get(PENDING) or []), suggestions, list(state.get(ABSTRACTS) or []))


def drop_user_items(state: dict[str, Any], view: UserView, *, target: bool) -> LoopItems:
    """Remove what :func:`user_items` finds from ``state``; what was removed."""
    found = user_items(state, view, target=target)
    user_id = view.user_id
    partition = user_key(user_id)
    if found.pending:
        state[PENDING] = []
    if found.abstracts:
        state[ABSTRACTS] = []
    unknown = [s for s in state.get(SUGGESTIONS) or [] if _unattributed(s)]
    if found.suggestions or unknown:
        state[SUGGESTIONS] = [
            s
            for s in state[SUGGESTIONS]
            if not _suggested_by(s, user_id, partition) and not _unattributed(s)
        ]
    found.suggestions += unknown  # removed with theirs: they may be the user's
    return found
