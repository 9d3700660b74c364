"""Group awareness in the console: member personas and the bot's self memory.

Through the stores group awareness itself uses
(:class:`~..storage.groups.stores.GroupStores`): their locks, caches and limits
apply, so an edit here is what the next group turn injects. Listing personas
reads the table page by page (the store has no listing of its own).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import func, select

from ..core.config import PersonaConfig
from ..core.text import short_error, single_line
from ..prompting.persona import FIELD_MAX_CHARS, VALUE_MAX_CHARS, PersonaField, fields_from_json
from ..storage.groups.stores import GroupStores
from ..storage.models import MemberPersona
from ..storage.shared.sessions import orm_session
from ..tools.args import parse_int, parse_text
from . import params
from .errors import audit, bad_request, conflict, guarded, not_found

__all__ = ["GroupAdmin"]


def _stamp(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, UTC).isoformat(timespec="seconds") if seconds else ""


def _fields_json(fields: list[PersonaField]) -> list[dict[str, Any]]:
    return [
        {"field": f.field, "value": f.value, "updated_at": _stamp(f.updated_at)} for f in fields
    ]


def _user_id(value: Any) -> str:
    return params.user_id(value)


def _field_text(body: Mapping[str, Any], name: str, limit: int) -> str:
    value = body.get(name)
    if not isinstance(value, str) or not single_line(value):
        bad_request(f"参数 {name} 必须是非空字符串")
    text = single_line(value)
    if len(text) > limit:
        bad_request(f"参数 {name} 过长（{len(text)} 字，上限 {limit} 字）")
    return text


class GroupAdmin:
    """Personas and self memory (404 when group awareness is not available)."""

    def __init__(self, stores: GroupStores | None, persona: PersonaConfig) -> None:
        self.stores = stores
        self.persona_config = persona

    def _stores(self) -> GroupStores:
        if self.stores is None:
            not_found("群聊感知未加载，成员画像与自我记忆不可用")
        return self.stores

    async def counts(self) -> dict[str, Any]:
        """How many personas and self-memory entries there are (for the overview)."""
        if self.stores is None:
            return {"available": False}
        stores = self.stores

        async def run() -> dict[str, Any]:
            async with orm_session() as session:
                personas = await session.scalar(select(func.count()).select_from(MemberPersona))
            return {
                "available": True,
                "personas": int(personas or 0),
                "self_entries": len(await stores.self_memory.list()),
            }

        try:
            return await run()
        except Exception as exc:  # the overview must not fail because of these tables
            return {"available": False, "error": short_error(exc)}

    # -- personas ------------------------------------------------------------------------

    async def personas(self, query: Mapping[str, Any]) -> dict[str, Any]:
        self._stores()
        offset, limit = params.page(query)

        async def run() -> dict[str, Any]:
            async with orm_session() as session:
                total = await session.scalar(select(func.count()).select_from(MemberPersona))
                rows = (
                    await session.scalars(
                        select(MemberPersona)
                        .order_by(MemberPersona.updated_at.desc(), MemberPersona.user_id)
                        .offset(offset)
                        .limit(limit)
                    )
                ).all()
                items = [(r.user_id, r.fields, r.learning_off, r.updated_at) for r in rows]
            return {
                "total": int(total or 0),
                "offset": offset,
                "limit": limit,
                "personas": [
                    {
                        "user_id": uid,
                        "fields": _fields_json(fields_from_json(raw)),
                        "learning_off": bool(off),
                        "updated_at": stamp.isoformat() + "+00:00" if stamp else "",
                    }
                    for uid, raw, off, stamp in items
                ],
            }

        return await guarded("console_list_personas", run)

    async def persona(self, user_id: Any) -> dict[str, Any]:
        stores = self._stores()
        uid = _user_id(user_id)
        found = await guarded("console_read_persona", lambda: stores.personas.of_user_anywhere(uid))
        return {
            "user_id": uid,
            "fields": _fields_json(found.fields),
            "learning_off": found.learning_off,
        }

    async def set_field(self, actor: str, user_id: Any, body: Mapping[str, Any]) -> dict[str, Any]:
        """Add or replace one field (merged like a learned one; refused while learning is off)."""
        stores = self._stores()
        uid = _user_id(user_id)
        name = _field_text(body, "field", FIELD_MAX_CHARS)
        value = _field_text(body, "value", VALUE_MAX_CHARS)
        merged = await guarded(
            "console_update_persona",
            lambda: stores.personas.merge(
                uid, [(name, value)], now=time.time(), max_chars=self.persona_config.total_max_chars
            ),
        )
        if not merged:
            conflict(f"成员 {uid} 已关闭画像学习（/memory persona off），未做修改")
        audit(actor, "修改成员画像", user_id=uid, field=name)
        return await self.persona(uid)

    async def clear(self, actor: str, user_id: Any) -> dict[str, Any]:
        stores = self._stores()
        uid = _user_id(user_id)
        if not await guarded("console_clear_persona", lambda: stores.personas.clear(uid)):
            not_found(f"成员 {uid} 没有画像")
        audit(actor, "清空成员画像", user_id=uid)
        return {"user_id": uid, "deleted": True}

    # -- self memory ---------------------------------------------------------------------------

    async def self_memory(self) -> dict[str, Any]:
        store = self._stores().self_memory
        entries = await guarded("console_read_self", store.list)
        return {
            "max_chars": store.max_chars,
            "chars": store.size(entries),
            "entries": [
                {"number": n, "id": e.id, "content": e.content}
                for n, e in enumerate(entries, start=1)
            ],
        }

    async def add_self(self, actor: str, body: Mapping[str, Any]) -> dict[str, Any]:
        store = self._stores().self_memory
        content = params.arg(parse_text, body, "content", max_chars=store.max_chars)
        result = await guarded("console_add_self", lambda: store.add(content))
        if not result.ok:
            bad_request(
                f"自我记忆超出上限，未写入：现有 {result.current_chars} 字 + 本条 "
                f"{result.attempted_chars} 字 > 上限 {result.limit} 字"
            )
        audit(actor, "新增自我记忆", chars=result.attempted_chars)
        return await self.self_memory()

    async def delete_self(self, actor: str, entry_id: Any) -> dict[str, Any]:
        """Delete one entry by its id (never by its position: the page may be stale)."""
        store = self._stores().self_memory
        sid = params.arg(parse_int, {"id": entry_id}, "id", low=1, high=2**63 - 1, default=0)
        entry = await guarded("console_delete_self", lambda: store.delete_id(sid))
        if entry is None:
            not_found(f"没有 ID 为 {sid} 的自我记忆（可能已被删除，请刷新）")
        audit(actor, "删除自我记忆", id=sid)
        return await self.self_memory()
