"""Member personas (Openmim's L2): one row per user id, shared by every group.

Read in every group turn for the speaker and the members in the window, so
reads go through an LRU cache (a persona without a row is cached as empty,
so members without a persona cost no query). Writes of one user are
serialised; a merge re-reads the row under that lock, so concurrent
extractions in two groups both land. ``learning_off`` is the member's
opt-out (``/memory persona off``): nothing is merged while it is set.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from nonebot_plugin_amrita.cache import LRUCache
from nonebot_plugin_orm import get_session
from sqlalchemy import delete, select

from ...core.protocols import Fence
from ...infra.locks import PartitionLocks
from ...prompting.persona import PersonaField, fields_from_json, fields_to_json, merge_fields
from ..models import MemberPersona, db_now

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


class PersonaStore:
    """Personas in the ``MemberPersona`` table, cached."""

    def __init__(self, cache_size: int = PERSONA_CACHE_SIZE) -> None:
        self._cache: LRUCache[str, Persona] = LRUCache(cache_size)
        self._locks = PartitionLocks()

    async def get(self, user_id: str) -> Persona:
        return (await self.get_many([user_id]))[user_id]

    async def get_many(self, user_ids: Iterable[str]) -> dict[str, Persona]:
        """The personas of ``user_ids`` (empty ones for users without a row); one query for misses."""
        out: dict[str, Persona] = {}
        missing: list[str] = []
        for user_id in dict.fromkeys(user_ids):
            cached = self._cache.get(user_id)
            if cached is None:
                missing.append(user_id)
            else:
                out[user_id] = cached
        if missing:
            stmt = select(MemberPersona).where(MemberPersona.user_id.in_(missing))
            async with get_session() as session:
                rows = {r.user_id: r for r in (await session.scalars(stmt)).all()}
            for user_id in missing:
                persona = _from_row(user_id, rows.get(user_id))
                self._cache.put(user_id, persona)
                out[user_id] = persona
        return out

    async def _write(self, persona: Persona) -> None:
        async with get_session() as session:
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
            await session.commit()
        self._cache.put(persona.user_id, persona)

    async def _fresh(self, user_id: str) -> Persona:
        async with get_session() as session:
            return _from_row(user_id, await session.get(MemberPersona, user_id))

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

        ``fence`` is awaited under the user's lock first (a forget meanwhile raises)."""
        async with self._locks.hold(user_id):
            if fence is not None:
                await fence()
            current = await self._fresh(user_id)
            if current.learning_off:
                self._cache.put(user_id, current)
                return False
            fields = merge_fields(current.fields, updates, now=now, max_chars=max_chars)
            await self._write(Persona(user_id, fields, False))
            return True

    async def clear(self, user_id: str) -> bool:
        """Delete the persona's fields (the opt-out stays as it is); ``False`` if it had none."""
        async with self._locks.hold(user_id):
            current = await self._fresh(user_id)
            if not current.fields:
                self._cache.put(user_id, current)
                return False
            await self._write(Persona(user_id, [], current.learning_off))
            return True

    async def set_learning(self, user_id: str, enabled: bool) -> None:
        """Resume (``True``) or stop learning a persona; stopping also deletes it."""
        async with self._locks.hold(user_id):
            current = await self._fresh(user_id)
            fields = current.fields if enabled else []
            await self._write(Persona(user_id, fields, not enabled))

    async def forget(self, user_id: str) -> int:
        """A user's forget: delete their persona; how many fields went.

        The row goes with its fields, except an opt-out (``learning_off``): it
        is the user's own decision, and dropping it would start learning them
        again at their next group message, so it stays (with no fields).
        """
        async with self._locks.hold(user_id):
            current = await self._fresh(user_id)
            if current.learning_off:
                if current.fields:
                    await self._write(Persona(user_id, [], True))
                else:
                    self._cache.put(user_id, current)
                return len(current.fields)
            async with get_session() as session:
                await session.execute(delete(MemberPersona).where(MemberPersona.user_id == user_id))
                await session.commit()
            self._cache.put(user_id, Persona(user_id))
            return len(current.fields)
