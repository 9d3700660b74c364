"""The chat LLM's memory tools (and ``update_memo``) as plain logic.

:class:`MemoryTools` holds the logic as plain async methods that take a
:class:`~..storage.scope.Scope` (who is asking, where, with which rights)
and the raw argument dict the model sent, and return a result dict. Every argument is treated as hostile: wrong
types, unknown enum values, empty or oversized text and foreign ids produce
``{"ok": false, "error": ...}`` and change nothing. The commands and the L3
loop reuse these methods, so their checks are the same everywhere.
Each chat tool is one method marked with :func:`~.surface.surface_tool`
(its schema, and optionally its switch, beside it); :mod:`..adapters.surface_tools`
registers every marked method with Amrita.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from amrita_core import FunctionDefinitionSchema
from nonebot import logger

from ..core.calendar import OwnerCalendar
from ..core.config import ConfigFile
from ..core.records import IMPORTANCE_LEVELS, SCOPES, origin_after_rewrite
from ..prompting.blocks import episode_line
from ..ranking.when import Period
from ..storage.episodes.store import EpisodeStore
from ..storage.memo_store import MemoService
from ..storage.memory_store import EXPLICIT, MemoryStore, NewMemory, WriteRules
from ..storage.scope import Scope
from . import results
from .args import (
    LIMITS,
    ToolArgError,
    guard_tool_call,
    parse_enum,
    parse_event_date,
    parse_int,
    parse_memory_id,
    parse_optional_id,
    parse_optional_text,
    parse_tags,
    parse_text,
    parse_window,
)
from .schemas import (
    EVENT_DATE_MEANING,
    REPLACES_MEANING,
    date_prop,
    define,
    importance_prop,
    limit_prop,
    memory_id_prop,
    offset_prop,
    prop,
    scope_prop,
    tags_prop,
    top_k_prop,
)
from .surface import surface_tool

__all__ = ["TOOL_EPISODES", "MemoryTools"]

TOOL_EPISODES = 8
"""The most past conversations one ``read_memory`` answer lists (the newest of the period)."""


# -- schemas (each tool's, beside the logic below; registered by adapters/surface_tools) ---
# They stand in every request of every chat turn, so every word earns its place: what
# the tool is for, when another tool is meant, who may change what; the limits are
# JSON Schema keywords (maxLength, maxItems, maximum) that Amrita checks before a call.


def write_memory_schema() -> FunctionDefinitionSchema:
    return define(
        "write_memory",
        "记下值得长期记住的事实(事件/偏好/计划等);每轮都要用的身份与稳定偏好用update_memo",
        {
            "content": prop("string", maxLength=LIMITS.content_chars),
            "tags": tags_prop(),
            "importance": importance_prop(),
            "scope": scope_prop(explained=True),
            "event_date": date_prop(EVENT_DATE_MEANING),
            "replaces": prop("string", REPLACES_MEANING),
        },
        ["content", "tags", "importance", "scope"],
    )


def read_memory_schema() -> FunctionDefinitionSchema:
    return define(
        "read_memory",
        "按语义检索记忆",
        {
            "query": prop("string"),
            "top_k": top_k_prop(),
            "importance": importance_prop(),
            "scope": scope_prop(),
            "since": date_prop(),
            "until": date_prop(),
        },
        ["query", "scope"],
    )


def update_memory_schema() -> FunctionDefinitionSchema:
    return define(
        "update_memory",
        "改一条记忆(id取自read/list);改群共享记忆需管理员",
        {
            "id": memory_id_prop(),
            "scope": scope_prop(),
            "content": prop("string", maxLength=LIMITS.content_chars),
            "tags": tags_prop(),
            "importance": importance_prop(),
            "event_date": date_prop(),
        },
        ["id", "scope"],
    )


def delete_memory_schema() -> FunctionDefinitionSchema:
    return define(
        "delete_memory",
        "删一条记忆;删群共享记忆需管理员",
        {"id": memory_id_prop(), "scope": scope_prop()},
        ["id", "scope"],
    )


def list_memory_schema() -> FunctionDefinitionSchema:
    return define(
        "list_memory",
        "按写入时间列出记忆",
        {
            "limit": limit_prop(),
            "offset": offset_prop(),
            "scope": scope_prop(),
            "since": date_prop(),
            "until": date_prop(),
        },
        ["limit", "scope"],
    )


def update_memo_schema() -> FunctionDefinitionSchema:
    return define(
        "update_memo",
        "整篇替换本会话备忘录(私聊=该用户,群聊=本群):融合原文与新事实写出完整全文,"
        "只写陈述,按身份>偏好>工具模式>近况排序;超上限被拒",
        {"content": prop("string")},
        ["content"],
    )


class MemoryTools:
    """The logic behind the surface tools, callable without a running bot.

    Who may read or change what is the request's :class:`~..storage.scope.Scope`
    (built once by the caller); these methods only ask it.
    """

    def __init__(
        self,
        store: MemoryStore,
        memo: MemoService,
        *,
        calendar: OwnerCalendar,
        memory_limit: int,
        config: ConfigFile | None = None,
        episodes: EpisodeStore | None = None,
    ) -> None:
        self.store = store
        self.episodes = episodes
        """Past conversations (issue #48): ``read_memory`` with a period also lists the
        chat's episodes of that period (``None``: not shown)."""
        self.memo = memo
        self.calendar = calendar
        """The owner's calendar (the runtime's): the stamps in the answers are its local time."""
        self.memory_limit = memory_limit
        self.config = config or ConfigFile()
        """The file configuration this runtime was built with: a tool's switch reads its key
        here (``enabled=lambda tools: tools.config.<key>``), so a new switch needs no wiring.
        Tests replace it (``model_copy(update=…)``) to flip a switch at run time."""

    async def _guard(
        self, name: str, call: Callable[[], Awaitable[dict[str, Any]]]
    ) -> dict[str, Any]:
        return await guard_tool_call("[Memory]", name, call)

    # -- L2 ------------------------------------------------------------------

    @surface_tool(write_memory_schema)
    async def write_memory(self, scope: Scope, args: Mapping[str, Any]) -> dict[str, Any]:
        async def run() -> dict[str, Any]:
            content = parse_text(args, "content", max_chars=LIMITS.content_chars)
            tags = parse_tags(args, required=True)
            importance = parse_enum(args, "importance", IMPORTANCE_LEVELS, "medium")
            kind = parse_enum(args, "scope", SCOPES, "user")
            event_time = parse_event_date(args)
            replaces = parse_optional_id(args, "replaces")
            assert content is not None and tags is not None and importance and kind
            partition = await scope.require("write", kind)
            older = None if replaces is None else await self.store.get(scope.view(kind), replaces)
            if replaces is not None and older is None:
                raise ToolArgError(f"记忆 {replaces} 不存在（或不属于 scope={kind} 的当前分区）")
            memory = NewMemory(
                partition,
                kind,
                content,
                tags=tags,
                importance=importance,
                origin=scope.origin,
                # A group memory records who wrote it (their export lists it).
                author=scope.user_id if kind == "group" else "",
                event_time=event_time or "",
            )
            # The user's own request: an automatic memory gives way (storage/room).
            rules = WriteRules(
                merge=True, limit=self.memory_limit, displace=EXPLICIT, fence=scope.fence
            )
            written = await self.store.write(memory, rules)
            if older is not None and not written.merged:
                await self.store.link_versions(partition, older.id, written.record.id)
                written.record.supersedes = older.id
            merged = " merged" if written.merged else ""
            logger.info(
                f"[Memory] write_memory{merged} partition={partition} id={written.record.id}"
            )
            return results.written(written, self.calendar, embeddings=self.store.vectors.enabled)

        return await self._guard("write_memory", run)

    @surface_tool(read_memory_schema)
    async def read_memory(self, scope: Scope, args: Mapping[str, Any]) -> dict[str, Any]:
        async def run() -> dict[str, Any]:
            query = parse_text(args, "query", max_chars=LIMITS.query_chars)
            top_k = parse_int(
                args, "top_k", low=1, high=LIMITS.top_k_max, default=LIMITS.top_k_default
            )
            importance = parse_enum(args, "importance", IMPORTANCE_LEVELS, None)
            kind = parse_enum(args, "scope", SCOPES, "user")
            window = parse_window(args, self.store.calendar.zone)
            assert query is not None and kind
            hits = await self.store.query(
                scope.view(kind), query, top_k=top_k, importance=importance, window=window
            )
            answer = results.found(kind, hits, self.calendar)
            if window is not None:
                conversations = await self._conversations(scope, window)
                if conversations:
                    answer["conversations"] = conversations
            return answer

        return await self._guard("read_memory", run)

    async def _conversations(self, scope: Scope, window: Period) -> list[str]:
        """The chat's episodes within ``window``, the newest :data:`TOOL_EPISODES`, one
        dated line each (oldest first): what was talked about then, beyond single facts."""
        if self.episodes is None or not self.config.episodes.enabled:
            return []
        found = await self.episodes.between(
            scope.conversation_view(), window.start.timestamp(), window.end.timestamp()
        )
        return [episode_line(e, self.calendar) for e in found[-TOOL_EPISODES:]]

    @surface_tool(update_memory_schema)
    async def update_memory(self, scope: Scope, args: Mapping[str, Any]) -> dict[str, Any]:
        async def run() -> dict[str, Any]:
            memory_id = parse_memory_id(args)
            kind = parse_enum(args, "scope", SCOPES, "user")
            content = parse_optional_text(args, "content", max_chars=LIMITS.content_chars)
            tags = parse_tags(args)
            importance = parse_enum(args, "importance", IMPORTANCE_LEVELS, None)
            event_time = parse_event_date(args)
            assert kind
            if content is None and tags is None and importance is None and event_time is None:
                raise ToolArgError("至少提供 content、tags、importance、event_date 之一")
            partition = await scope.require("update", kind)
            view = scope.view(kind)
            missing = f"记忆 {memory_id} 不存在（或不属于 scope={kind} 的当前分区）"
            origin: str | None = None
            if view.origins.narrows or (content is not None and kind == "user"):
                current = await self.store.get(view, memory_id)
                # Its answer shows the memory: one this chat may not read is missing here.
                if current is None:
                    raise ToolArgError(missing)
                if content is not None and kind == "user":
                    # A private chat's text must not stay readable in the memory's group.
                    origin = origin_after_rewrite(current.origin, scope.origin)
            record = await self.store.update(
                partition,
                memory_id,
                content=content,
                tags=tags,
                importance=importance,
                origin=origin,
                event_time=event_time,
                fence=scope.fence,
            )
            if record is None:
                raise ToolArgError(missing)
            logger.info(f"[Memory] update_memory partition={partition} id={memory_id}")
            return results.updated(record, self.calendar, embeddings=self.store.vectors.enabled)

        return await self._guard("update_memory", run)

    @surface_tool(delete_memory_schema)
    async def delete_memory(self, scope: Scope, args: Mapping[str, Any]) -> dict[str, Any]:
        async def run() -> dict[str, Any]:
            memory_id = parse_memory_id(args)
            kind = parse_enum(args, "scope", SCOPES, "user")
            assert kind
            partition = await scope.require("delete", kind)
            if not await self.store.delete(partition, memory_id, fence=scope.fence):
                raise ToolArgError(f"记忆 {memory_id} 不存在（或不属于 scope={kind} 的当前分区）")
            logger.info(f"[Memory] delete_memory partition={partition} id={memory_id}")
            return results.deleted(memory_id)

        return await self._guard("delete_memory", run)

    @surface_tool(list_memory_schema)
    async def list_memory(self, scope: Scope, args: Mapping[str, Any]) -> dict[str, Any]:
        async def run() -> dict[str, Any]:
            limit = parse_int(
                args, "limit", low=1, high=LIMITS.list_max, default=LIMITS.list_default
            )
            offset = parse_int(args, "offset", low=0, high=1_000_000, default=0)
            kind = parse_enum(args, "scope", SCOPES, "user")
            window = parse_window(args, self.store.calendar.zone)
            assert kind
            view = scope.view(kind)
            records = await self.store.list(view, limit=limit, offset=offset, window=window)
            total = await self.store.count(view, window=window)
            return results.listed(kind, total, offset, records, self.calendar)

        return await self._guard("list_memory", run)

    # -- L1 ----------------------------------------------------------------------

    @surface_tool(update_memo_schema)
    async def update_memo(self, scope: Scope, args: Mapping[str, Any]) -> dict[str, Any]:
        async def run() -> dict[str, Any]:
            content = args.get("content")
            if not isinstance(content, str):
                raise ToolArgError("参数 content 必须是字符串（备忘录的完整新全文）")
            content = content.strip()
            uni_id = await scope.require_memo()
            result = await self.memo.update(uni_id, content, fence=scope.fence)
            if result.ok:
                logger.info(f"[Memory] update_memo uni_id={uni_id} chars={result.current_chars}")
            return results.memo_written(result)

        return await self._guard("update_memo", run)
