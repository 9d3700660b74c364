"""L1 memos in the console: list, read, replace, clear.

Reads and writes go through :class:`~..storage.memo_store.MemoService` (its
per-uni_id lock, its write-through cache that the chat's memo hook reads,
its hard limit), so a console edit is seen by the very next chat turn. A
memo is "deleted" by writing it empty: the hook injects nothing for an empty
memo, exactly as for one that never existed, and the cache stays coherent.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sqlalchemy import func, select

from ..storage.keys import parse_key
from ..storage.memo_store import MemoService
from ..storage.models import UserMemo
from ..storage.scope import operator_view
from ..storage.shared.sessions import orm_session
from . import params
from .errors import audit, bad_request, guarded, not_found

__all__ = ["MemoAdmin"]


def _kind(uni_id: str) -> str:
    parsed = parse_key(uni_id)
    return parsed[0] if parsed else "unknown"


class MemoAdmin:
    """The memo operations of the console."""

    def __init__(self, memo: MemoService) -> None:
        self.memo = memo

    async def list(self, query: Mapping[str, Any]) -> dict[str, Any]:
        """Non-empty memos, most recently changed first, paged (no text, only sizes)."""
        offset, limit = params.page(query)

        async def run() -> dict[str, Any]:
            async with orm_session() as session:
                total = await session.scalar(
                    select(func.count()).select_from(UserMemo).where(UserMemo.content != "")
                )
                rows = (
                    await session.execute(
                        select(UserMemo.user_id, func.length(UserMemo.content), UserMemo.updated_at)
                        .where(UserMemo.content != "")
                        .order_by(UserMemo.updated_at.desc(), UserMemo.user_id)
                        .offset(offset)
                        .limit(limit)
                    )
                ).all()
            return {
                "total": int(total or 0),
                "offset": offset,
                "limit": limit,
                "max_chars": self.memo.max_chars,
                "memos": [
                    {
                        "uni_id": uid,
                        "kind": _kind(uid),
                        "chars": int(chars or 0),
                        "updated_at": stamp.isoformat() + "+00:00" if stamp else "",
                    }
                    for uid, chars, stamp in rows
                ],
            }

        return await guarded("console_list_memos", run)

    async def get(self, uni_id: Any) -> dict[str, Any]:
        key = params.uni_id(uni_id)
        text = await guarded("console_read_memo", lambda: self.memo.get(operator_view(key)))
        return {
            "uni_id": key,
            "kind": _kind(key),
            "content": text,
            "chars": len(text),
            "max_chars": self.memo.max_chars,
            "exists": bool(text),
        }

    async def put(self, actor: str, uni_id: Any, body: Mapping[str, Any]) -> dict[str, Any]:
        key = params.uni_id(uni_id)
        content = body.get("content")
        if not isinstance(content, str):
            bad_request("参数 content 必须是字符串（备忘录的完整新全文）")
        content = content.strip()
        result = await guarded("console_update_memo", lambda: self.memo.update(key, content))
        if not result.ok:
            bad_request(
                f"备忘录超出上限，未写入：本次 {result.attempted_chars} 字，上限 {result.limit} 字"
                f"（当前已存 {result.current_chars} 字）"
            )
        audit(actor, "修改备忘录", uni_id=key, chars=result.current_chars)
        return await self.get(key)

    async def delete(self, actor: str, uni_id: Any) -> dict[str, Any]:
        key = params.uni_id(uni_id)
        if not await guarded("console_read_memo", lambda: self.memo.get(operator_view(key))):
            not_found(f"{key} 没有备忘录")
        await guarded("console_clear_memo", lambda: self.memo.update(key, ""))
        audit(actor, "清空备忘录", uni_id=key)
        return {"uni_id": key, "deleted": True}
