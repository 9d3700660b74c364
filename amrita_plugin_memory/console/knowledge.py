"""The global knowledge base and the user profile in the console.

Both belong to the L3 loop: the knowledge base is the runner's own
:class:`~..subconscious.knowledge_base.KnowledgeBaseManager` (files, index and
vectors kept in step by it, under its lock), the profile its
:class:`~..subconscious.profile_store.ProfileStore`. The console never writes
their files itself, so every check (kid format, sizes, line limits) is the
one the loop's tools get.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..subconscious.knowledge_base import KnowledgeBaseManager, KnowledgeEntry, KnowledgeError
from ..subconscious.profile_store import ProfileStore
from . import params
from .errors import audit, bad_request, guarded, not_found

__all__ = ["KnowledgeAdmin", "ProfileAdmin"]

_SECTIONS = ("summary", "body")


def _entry_json(entry: KnowledgeEntry) -> dict[str, Any]:
    return {
        "kid": entry.kid,
        "title": entry.title,
        "summary": entry.summary,
        "body": entry.body,
        "created_at": entry.created_at,
        "updated_at": entry.updated_at,
    }


class KnowledgeAdmin:
    """Knowledge entries through the L3 runner's manager (404 while it is disabled)."""

    def __init__(self, kb: KnowledgeBaseManager | None) -> None:
        self.kb = kb

    def _manager(self) -> KnowledgeBaseManager:
        if self.kb is None:
            not_found(
                "知识库未启用（需要 [subconscious] enabled = true、target_user_id 与 enable_knowledge = true）"
            )
        return self.kb

    async def _existing(self, kid: Any) -> KnowledgeEntry:
        kb = self._manager()
        try:
            key = kb.check_kid(kid)
        except KnowledgeError as exc:
            bad_request(str(exc))
        try:
            return await kb.get(key)
        except KnowledgeError:
            not_found(f"知识条目 {key} 不存在")

    async def list(self, query: Mapping[str, Any]) -> dict[str, Any]:
        kb = self._manager()
        offset, limit = params.page(query)
        entries = await guarded("console_list_knowledge", kb.list)
        return {
            "total": len(entries),
            "offset": offset,
            "limit": limit,
            "max_chars": kb.max_chars,
            "entries": entries[offset : offset + limit],
        }

    async def get(self, kid: Any) -> dict[str, Any]:
        return _entry_json(await guarded("console_read_knowledge", lambda: self._existing(kid)))

    async def create(self, actor: str, body: Mapping[str, Any]) -> dict[str, Any]:
        kb = self._manager()
        entry = await guarded(
            "console_create_knowledge",
            lambda: kb.create(body.get("title"), body.get("summary"), body.get("body")),
        )
        audit(actor, "新建知识", kid=entry.kid)
        return _entry_json(entry)

    async def update(self, actor: str, kid: Any, body: Mapping[str, Any]) -> dict[str, Any]:
        kb = self._manager()
        current = await guarded("console_read_knowledge", lambda: self._existing(kid))
        entry = await guarded(
            "console_update_knowledge",
            lambda: kb.update(
                current.kid,
                title=body.get("title"),
                summary=body.get("summary"),
                body=body.get("body"),
            ),
        )
        fields = ",".join(k for k in ("title", "summary", "body") if body.get(k) is not None)
        audit(actor, "修改知识", kid=entry.kid, fields=fields)
        return _entry_json(entry)

    async def delete(self, actor: str, kid: Any) -> dict[str, Any]:
        kb = self._manager()
        current = await guarded("console_read_knowledge", lambda: self._existing(kid))
        await guarded("console_delete_knowledge", lambda: kb.delete(current.kid))
        audit(actor, "删除知识", kid=current.kid)
        return {"deleted": current.kid}


class ProfileAdmin:
    """The user profile (``user_profile.md``): both sections, each replaced whole."""

    def __init__(self, profile: ProfileStore, *, target: str | None) -> None:
        self.profile = profile
        self.target = target

    async def get(self) -> dict[str, Any]:
        loaded = await guarded("console_read_profile", self.profile.load)
        return {
            "target_user_id": self.target,
            "exists": await guarded("console_read_profile", self.profile.exists),
            "summary": "\n".join(loaded.summary),
            "body": "\n".join(loaded.body),
            "summary_lines": len(loaded.summary),
            "body_lines": len(loaded.body),
        }

    async def put(self, actor: str, section: Any, body: Mapping[str, Any]) -> dict[str, Any]:
        if section not in _SECTIONS:
            bad_request(f"section 的值 {str(section)[:20]!r} 无效，允许的取值：summary, body")
        content = body.get("content")
        if not isinstance(content, str):
            bad_request("参数 content 必须是字符串（该部分的完整新全文）")
        content = content.strip("\n")

        async def run() -> dict[str, Any]:
            total = len((await self.profile.load()).section(section))
            if total and content:
                await self.profile.update(
                    "replace", section=section, start_line=1, end_line=total, content=content
                )
            elif total:
                await self.profile.update("delete", section=section, start_line=1, end_line=total)
            elif content:
                await self.profile.update("insert", section=section, start_line=1, content=content)
            return await self.get()

        result = await guarded("console_update_profile", run)
        audit(actor, "修改用户画像", section=section)
        return result
