"""Member personas (Openmim's L2): one row per user id, shared by every group.

Read in every group turn for the speaker and the members in the window, so
reads go through an LRU cache (a persona without a row is cached as empty,
so members without a persona cost no query). Writes of one user are
serialised; a merge re-reads the row under that lock, so concurrent
extractions in two groups both land. ``learning_off`` is the member's
opt-out (``/memory persona off``): nothing is merged while it is set.

In remote mode (:meth:`PersonaStore.share`) the bots on one database share the
table: every write commits a change-feed row for the user's personal partition
with it (in its transaction, under the user's lock) and a feed row for it drops the cached
persona in every other process, so a forget or a ``/memory persona off`` through
one bot leaves no persona in another bot's group prompts a second later. Every change
of a user's row (a merge, a forget, a switch) also holds the user's lease every process
takes (:meth:`PersonaStore._held`): a merge in another bot that checked its fence before
a forget's tombstone lands before the forget's delete, never after it.

A chat turn reads personas through a view only (issue #49): the members of the
turn's group through its :class:`~..scope.GroupView` (:meth:`PersonaStore.of_members`),
the speaker's own through the :class:`~..scope.View` of their partition
(:meth:`PersonaStore.own`). A read of any user by id (the console, a user's export and
forget) is the operator door :meth:`PersonaStore.of_users_anywhere`.

Every read and write of the table is waited for at most the bound of the store's
:class:`~..shared.sessions.SharedWork` (local mode too); past it the caller gets a
:class:`~..shared.sessions.SharedDatabaseError`.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass, field

from sqlalchemy import delete, select, update
from sqlalchemy.exc import IntegrityError

from ...core.protocols import Fence
from ...infra.locks import PartitionLocks
from ...prompting.persona import PersonaField, fields_from_json, fields_to_json, merge_fields
from ..keys import user_key, user_of_key
from ..models import MemberPersona, db_now
from ..scope import GroupView, View
from ..shared.coherence import SAFETY_EXPIRY, Coherence
from ..shared.keyed import KeyedCache
from ..shared.sessions import SharedWork, orm_session

__all__ = ["Persona", "PersonaStore"]

PERSONA_CACHE_SIZE = 4096


@dataclass(slots=True)
class Persona:
    user_id: str
    fields: list[PersonaField] = field(default_factory=list)
    learning_off: bool = False


def _from_row(user_id: str, row: MemberPersona | None) -> Persona:
    if row is None:
        return Persona(user_id)
    return Persona(user_id, fields_from_json(row.fields), bool(row.learning_off))


async def _read_many(user_ids: list[str]) -> dict[str, Persona]:
    """The stored personas of ``user_ids`` (users without a row left out)."""
    stmt = select(MemberPersona).where(MemberPersona.user_id.in_(user_ids))
    async with orm_session() as session:
        return {r.user_id: _from_row(r.user_id, r) for r in (await session.scalars(stmt)).all()}


class PersonaStore:
    """Personas in the ``MemberPersona`` table, cached."""

    def __init__(
        self, cache_size: int = PERSONA_CACHE_SIZE, *, work: SharedWork | None = None
    ) -> None:
        self.work = work or SharedWork()
        """Bounds every operation's wait on the table (the runtime's one instance)."""
        self._cache: KeyedCache[Persona] = KeyedCache(cache_size)
        self._locks = PartitionLocks()
        self.coherence = Coherence(MemberPersona.__tablename__)
        """The process's change feed in remote mode (:meth:`share`); inactive otherwise."""

    def share(self, coherence: Coherence) -> None:
        """Keep the cache coherent with other processes' writes (remote mode)."""
        self.coherence = coherence
        coherence.follow_with(self._changed_elsewhere, self._cache.clear)
        self._cache.ttl = SAFETY_EXPIRY

    @contextlib.asynccontextmanager
    async def _held(self, user_id: str, what: str) -> AsyncIterator[None]:
        """The user's lock here and their lease in every process (remote mode)."""
        async with self._locks.hold(user_id), self.coherence.exclusive(f"persona:{user_id}", what):
            yield

    def _changed_elsewhere(self, partition: str) -> None:
        """A feed row for ``partition``: a user's partition drops their persona."""
        user_id = user_of_key(partition)
        if user_id is not None:
            self._cache.invalidate(user_id)

    def cached(self, user_id: str) -> bool:
        """Whether the persona of ``user_id`` is in this process's cache (tests)."""
        return user_id in self._cache

    async def of_members(self, view: GroupView, user_ids: Iterable[str]) -> dict[str, Persona]:
        """The personas of members ``user_ids`` of ``view``'s group (a turn's ``<PERSONAS>``,
        the group's extraction); a plain group id is refused (``TypeError``)."""
        GroupView.check(view)
        return await self.of_users_anywhere(user_ids)

    async def own(self, view: View) -> Persona:
        """The persona of the user whose personal partition ``view`` is (``/memory persona``);
        a view of a group's partition is refused (``ValueError``)."""
        user_id = user_of_key(View.check(view).partition)
        if user_id is None:
            raise ValueError("a persona is read through the view of a user's own partition")
        return (await self.of_users_anywhere([user_id]))[user_id]

    async def of_user_anywhere(self, user_id: str) -> Persona:
        """Operator door: the persona of any user (the console, a user's export and forget)."""
        return (await self.of_users_anywhere([user_id]))[user_id]

    async def of_users_anywhere(self, user_ids: Iterable[str]) -> dict[str, Persona]:
        """Operator door (and what the views read through): the personas of any ``user_ids``
        (empty ones for users without a row); one query for misses."""
        await self.coherence.fresh()
        out: dict[str, Persona] = {}
        missing: list[str] = []
        for user_id in dict.fromkeys(user_ids):
            cached = self._cache.get(user_id)
            if cached is None:
                missing.append(user_id)
            else:
                out[user_id] = cached
        if missing:
            generation = self._cache.generation
            found = await self.work.run(_read_many(missing), "读取成员画像")
            for user_id in missing:
                persona = found.get(user_id, Persona(user_id))
                self._cache.put(user_id, persona, since=generation)
                out[user_id] = persona
        return out

    async def _write(self, persona: Persona) -> None:
        await self.work.run(self._store(persona), "写入成员画像")
        self._cache.written(persona.user_id, persona)

    async def _store(self, persona: Persona) -> None:
        """The row written, its feed row committed with it (:meth:`Coherence.note`)."""
        async with orm_session() as session:
            row = await session.get(MemberPersona, persona.user_id)
            data = fields_to_json(persona.fields)
            if row is None:
                session.add(
                    MemberPersona(
                        user_id=persona.user_id,
                        fields=data,
                        learning_off=persona.learning_off,
                        updated_at=db_now(),
                    )
                )
            else:
                row.fields = data
                row.learning_off = persona.learning_off
                row.updated_at = db_now()
            await self.coherence.note(session, [user_key(persona.user_id)])
            await session.commit()

    async def _fresh(self, user_id: str) -> Persona:
        """The row as it is now, cached unless anything was invalidated meanwhile."""
        generation = self._cache.generation
        persona = (await self.work.run(_read_many([user_id]), "读取成员画像")).get(
            user_id, Persona(user_id)
        )
        self._cache.put(user_id, persona, since=generation)
        return persona

    async def merge(
        self,
        user_id: str,
        updates: list[tuple[str, str]],
        *,
        now: float,
        max_chars: int,
        fence: Fence | None = None,
    ) -> bool:
        """Apply ``(field, value)`` updates; ``False`` (nothing written) when learning is off.

        ``fence`` is awaited under the user's lock and lease first (a forget meanwhile raises)."""
        async with self._held(user_id, "修改成员画像"):
            if fence is not None:
                await fence()
            for _ in range(3):
                current = await self._fresh(user_id)
                if current.learning_off:
                    return False
                fields = merge_fields(current.fields, updates, now=now, max_chars=max_chars)
                written = await self._write_learning(Persona(user_id, fields, False))
                if written is not None:
                    return written
            return False

    async def _write_learning(self, persona: Persona) -> bool | None:
        """Write ``persona``'s fields only while learning is on, in one statement: another
        process's ``/memory persona off`` in between is never overwritten. ``False``:
        learning is off now; ``None``: the row appeared meanwhile (read it again)."""
        try:
            written = await self.work.run(self._store_learning(persona), "写入成员画像")
        except IntegrityError:
            return None
        if written:
            self._cache.written(persona.user_id, persona)
        return written

    async def _store_learning(self, persona: Persona) -> bool:
        """:meth:`_write_learning`'s transaction, its feed row committed with it."""
        data = fields_to_json(persona.fields)
        async with orm_session() as session:
            result = await session.execute(
                update(MemberPersona)
                .where(
                    MemberPersona.user_id == persona.user_id,
                    MemberPersona.learning_off.is_(False),
                )
                .values(fields=data, updated_at=db_now())
            )
            if not getattr(result, "rowcount", 0):
                if await session.get(MemberPersona, persona.user_id) is not None:
                    return False  # switched off meanwhile (by any process)
                session.add(
                    MemberPersona(
                        user_id=persona.user_id, fields=data, learning_off=False,
                        updated_at=db_now(),
                    )
                )  # fmt: skip
            await self.coherence.note(session, [user_key(persona.user_id)])
            await session.commit()
        return True

    async def clear(self, user_id: str) -> bool:
        """Delete the persona's fields (the opt-out stays as it is); ``False`` if it had none."""
        async with self._held(user_id, "删除成员画像"):
            current = await self._fresh(user_id)
            if not current.fields:
                return False
            await self._write(Persona(user_id, [], current.learning_off))
            return True

    async def set_learning(self, user_id: str, enabled: bool) -> None:
        """Resume (``True``) or stop learning a persona; stopping also deletes it."""
        async with self._held(user_id, "修改成员画像"):
            current = await self._fresh(user_id)
            fields = current.fields if enabled else []
            await self._write(Persona(user_id, fields, not enabled))

    async def forget(self, user_id: str) -> int:
        """A user's forget: delete their persona; how many fields went.

        The row goes with its fields, except an opt-out (``learning_off``): it
        is the user's own decision, and dropping it would start learning them
        again at their next group message, so it stays (with no fields).
        """
        async with self._held(user_id, "删除成员画像"):
            current = await self._fresh(user_id)
            if current.learning_off:
                if current.fields:
                    await self._write(Persona(user_id, [], True))
                return len(current.fields)
            await self.work.run(self._delete(user_id), "删除成员画像")
            self._cache.written(user_id, Persona(user_id))
            return len(current.fields)

    async def _delete(self, user_id: str) -> None:
        async with orm_session() as session:
            await session.execute(delete(MemberPersona).where(MemberPersona.user_id == user_id))
            await self.coherence.note(session, [user_key(user_id)])
            await session.commit()
