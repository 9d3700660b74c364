"""The chat LLM's memory tools (and ``update_memo``) as plain logic.

:class:`MemoryTools` holds the logic as plain async methods that take a
:class:`Caller` (who is asking, where) and the raw argument dict the model
sent, and return a result dict. Every argument is treated as hostile: wrong
types, unknown enum values, empty or oversized text and foreign ids produce
``{"ok": false, "error": ...}`` and change nothing. The commands and the L3
loop reuse these methods, so their checks are the same everywhere.
Registration with Amrita is :mod:`..adapters.surface_tools`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from nonebot import logger

from ..core.records import (
    IMPORTANCE_LEVELS,
    ORIGIN_PRIVATE,
    SCOPES,
    GroupPrivacy,
    OriginFilter,
    origin_of_chat,
)
from ..storage.keys import ChatTarget
from ..storage.memo_store import MemoService
from ..storage.memory_store import EXPLICIT, MemoryStore
from .args import (
    LIMITS,
    ToolArgError,
    guard_tool_call,
    parse_enum,
    parse_int,
    parse_memory_id,
    parse_optional_text,
    parse_tags,
    parse_text,
)

__all__ = ["Caller", "GroupEditors", "MemoryTools", "caller_for_user"]

GroupEditors = Literal["member", "admin"]
"""``group_memo_editors`` (config): who may write a group's memo and new group memories."""


@dataclass(frozen=True, slots=True)
class Caller:
    """Who calls a tool, and where.

    ``can_manage_group`` is evaluated only when a group memory is about to be
    changed (it may query the OneBot API for the sender's role).
    """

    target: ChatTarget
    can_manage_group: Callable[[], Awaitable[bool]]


async def _never() -> bool:
    return False


def caller_for_user(target: ChatTarget) -> Caller:
    """A caller without group management rights (e.g. the L3 loop)."""
    return Caller(target, _never)


class MemoryTools:
    """The logic behind the surface tools, callable without a running bot."""

    def __init__(
        self,
        store: MemoryStore,
        memo: MemoService,
        *,
        memory_limit: int,
        group_editors: GroupEditors = "member",
        privacy: GroupPrivacy | None = None,
    ) -> None:
        self.store = store
        self.memo = memo
        self.memory_limit = memory_limit
        self.group_editors: GroupEditors = group_editors
        """``group_memo_editors``: with "admin", writing the group memo or a new
        group memory needs the rights that changing one always needs."""
        self.privacy = privacy or GroupPrivacy()
        """Which of the speaker's memories a chat reads (``private_memories_in_groups``,
        ``group_memories_across_groups``)."""

    def origins_for(self, caller: Caller, scope: str, private_reply: bool) -> OriginFilter:
        """Which of the partition's memories this read may return.

        A group's shared partition: all. The speaker's own: what
        :meth:`GroupPrivacy.origins_for` allows in this chat; an answer sent to
        the speaker privately (``/memory user list`` in a group) is read as in
        their private chat.
        """
        if scope != "user":
            return OriginFilter.ALL
        chat = ORIGIN_PRIVATE if private_reply else origin_of_chat(caller.target.group_id)
        return self.privacy.origins_for(chat)

    @staticmethod
    def partition_for(caller: Caller, scope: str) -> str:
        if scope == "user":
            return caller.target.user
        if caller.target.group is None:
            raise ToolArgError("scope=group 只能在群聊中使用；私聊中请使用 scope=user")
        return caller.target.group

    async def _require_manager(self, caller: Caller, scope: str, action: str) -> None:
        if scope == "group" and not await caller.can_manage_group():
            raise ToolArgError(f"{action}群共享记忆需要群管理员、群主或超级用户权限")

    async def _require_group_editor(self, caller: Caller, what: str) -> None:
        """With ``group_memo_editors = "admin"``, refuse a group write by a non-manager."""
        if self.group_editors == "admin" and not await caller.can_manage_group():
            raise ToolArgError(
                f"本 Bot 设置为只有群管理员、群主或超级用户可以{what}（group_memo_editors = admin），"
                "未做任何修改"
            )

    async def _guard(
        self, name: str, call: Callable[[], Awaitable[dict[str, Any]]]
    ) -> dict[str, Any]:
        return await guard_tool_call("[Memory]", name, call)

    # -- L2 ------------------------------------------------------------------

    async def write_memory(self, caller: Caller, args: Mapping[str, Any]) -> dict[str, Any]:
        async def run() -> dict[str, Any]:
            content = parse_text(args, "content", max_chars=LIMITS.content_chars)
            tags = parse_tags(args, required=True)
            importance = parse_enum(args, "importance", IMPORTANCE_LEVELS, "medium")
            scope = parse_enum(args, "scope", SCOPES, "user")
            assert content is not None and tags is not None and importance and scope
            partition = self.partition_for(caller, scope)
            if scope == "group":
                await self._require_group_editor(caller, "写入群共享记忆")
            written = await self.store.remember(
                partition,
                scope,
                content,
                tags=tags,
                importance=importance,
                limit=self.memory_limit,
                origin=origin_of_chat(caller.target.group_id),
                # A group memory records who wrote it (their export lists it).
                author=caller.target.user_id if scope == "group" else "",
                # The user's own request: an automatic memory gives way (storage/room).
                displace=EXPLICIT,
            )
            record = written.record
            if written.merged:
                logger.info(f"[Memory] write_memory merged partition={partition} id={record.id}")
                return {
                    "ok": True,
                    "merged": True,
                    "memory": record.compact(),
                    "note": "与已有记忆重复，已合并到该条（更新时间、合并标签、取较高重要性）",
                }
            logger.info(f"[Memory] write_memory partition={partition} id={record.id}")
            return {"ok": True, "memory": record.compact()}

        return await self._guard("write_memory", run)

    async def read_memory(
        self, caller: Caller, args: Mapping[str, Any], *, private_reply: bool = False
    ) -> dict[str, Any]:
        async def run() -> dict[str, Any]:
            query = parse_text(args, "query", max_chars=LIMITS.query_chars)
            top_k = parse_int(
                args, "top_k", low=1, high=LIMITS.top_k_max, default=LIMITS.top_k_default
            )
            importance = parse_enum(args, "importance", IMPORTANCE_LEVELS, None)
            scope = parse_enum(args, "scope", SCOPES, "user")
            assert query is not None and scope
            partition = self.partition_for(caller, scope)
            hits = await self.store.query(
                partition,
                query,
                top_k=top_k,
                importance=importance,
                origins=self.origins_for(caller, scope, private_reply),
            )
            return {"ok": True, "scope": scope, "memories": [h.compact() for h in hits]}

        return await self._guard("read_memory", run)

    async def update_memory(self, caller: Caller, args: Mapping[str, Any]) -> dict[str, Any]:
        async def run() -> dict[str, Any]:
            memory_id = parse_memory_id(args)
            scope = parse_enum(args, "scope", SCOPES, "user")
            content = parse_optional_text(args, "content", max_chars=LIMITS.content_chars)
            tags = parse_tags(args)
            importance = parse_enum(args, "importance", IMPORTANCE_LEVELS, None)
            assert scope
            if content is None and tags is None and importance is None:
                raise ToolArgError("至少提供 content、tags、importance 之一")
            partition = self.partition_for(caller, scope)
            await self._require_manager(caller, scope, "修改")
            origins = self.origins_for(caller, scope, private_reply=False)
            if origins.narrows and not await self._readable(
                partition, memory_id, origins
            ):  # its answer shows the memory: one this chat may not read is missing here
                raise ToolArgError(f"记忆 {memory_id} 不存在（或不属于 scope={scope} 的当前分区）")
            record = await self.store.update(
                partition, memory_id, content=content, tags=tags, importance=importance
            )
            if record is None:
                raise ToolArgError(f"记忆 {memory_id} 不存在（或不属于 scope={scope} 的当前分区）")
            logger.info(f"[Memory] update_memory partition={partition} id={memory_id}")
            return {"ok": True, "memory": record.compact()}

        return await self._guard("update_memory", run)

    async def _readable(self, partition: str, memory_id: str, origins: OriginFilter) -> bool:
        current = await self.store.get(partition, memory_id)
        return current is not None and origins.allows(current.origin)

    async def delete_memory(self, caller: Caller, args: Mapping[str, Any]) -> dict[str, Any]:
        async def run() -> dict[str, Any]:
            memory_id = parse_memory_id(args)
            scope = parse_enum(args, "scope", SCOPES, "user")
            assert scope
            partition = self.partition_for(caller, scope)
            await self._require_manager(caller, scope, "删除")
            if not await self.store.delete(partition, memory_id):
                raise ToolArgError(f"记忆 {memory_id} 不存在（或不属于 scope={scope} 的当前分区）")
            logger.info(f"[Memory] delete_memory partition={partition} id={memory_id}")
            return {"ok": True, "deleted": memory_id}

        return await self._guard("delete_memory", run)

    async def list_memory(
        self, caller: Caller, args: Mapping[str, Any], *, private_reply: bool = False
    ) -> dict[str, Any]:
        async def run() -> dict[str, Any]:
            limit = parse_int(
                args, "limit", low=1, high=LIMITS.list_max, default=LIMITS.list_default
            )
            offset = parse_int(args, "offset", low=0, high=1_000_000, default=0)
            scope = parse_enum(args, "scope", SCOPES, "user")
            assert scope
            partition = self.partition_for(caller, scope)
            origins = self.origins_for(caller, scope, private_reply)
            records = await self.store.list(partition, limit=limit, offset=offset, origins=origins)
            total = await self.store.count(partition, origins=origins)
            return {
                "ok": True,
                "scope": scope,
                "total": total,
                "offset": offset,
                "memories": [r.compact() for r in records],
            }

        return await self._guard("list_memory", run)

    # -- L1 ----------------------------------------------------------------------

    async def update_memo(self, caller: Caller, args: Mapping[str, Any]) -> dict[str, Any]:
        async def run() -> dict[str, Any]:
            content = args.get("content")
            if not isinstance(content, str):
                raise ToolArgError("参数 content 必须是字符串（备忘录的完整新全文）")
            content = content.strip()
            if caller.target.is_group:
                await self._require_group_editor(caller, "修改群备忘录")
            uni_id = caller.target.session
            result = await self.memo.update(uni_id, content)
            if not result.ok:
                return {
                    "ok": False,
                    "error": (
                        f"备忘录超出上限，未写入：本次 {result.attempted_chars} 字，上限 {result.limit} 字"
                        f"（当前已存 {result.current_chars} 字）。请压缩（细节可用 write_memory 下放到 L2）后整篇重写"
                    ),
                    "current_chars": result.current_chars,
                    "attempted_chars": result.attempted_chars,
                    "limit": result.limit,
                }
            logger.info(f"[Memory] update_memo uni_id={uni_id} chars={result.current_chars}")
            return {"ok": True, "chars": result.current_chars, "limit": result.limit}

        return await self._guard("update_memo", run)
