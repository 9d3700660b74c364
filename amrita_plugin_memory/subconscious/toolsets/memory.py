"""The loop's L2 memory tools: the target user's personal partition only.

Every tool delegates to the chat LLM's own tool logic
(:class:`~...tools.memory_tools.MemoryTools`) with a fixed :class:`~...storage.scope.Scope` (``Scope.of_loop``) and
``scope=user``, so arguments are validated and bounded exactly as for the
chat LLM.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from amrita_core import FunctionDefinitionSchema, ToolContext

from ...core.calendar import OwnerCalendar
from ...core.records import MemoryRecord
from ...ranking.repeats import repeats_memory
from ...storage.memory_store import MemoryStore
from ...storage.scope import Scope
from ...tools.args import LIMITS, parse_number
from ...tools.memory_tools import MemoryTools
from ...tools.schemas import (
    EVENT_DATE_MEANING,
    REPLACES_MEANING,
    date_prop,
    define,
    importance_prop,
    limit_prop,
    memory_id_prop,
    offset_prop,
    prop,
    tags_prop,
    top_k_prop,
)
from ...upkeep.stored_vectors import stored_vectors
from ..context import LoopContext, count_action
from .base import LoopTool, SimpleGroup, guard

__all__ = [
    "DUPLICATE_GUIDANCE",
    "DUPLICATE_SCAN_MAX",
    "MemoryToolset",
    "find_duplicate_groups",
    "memory_schemas",
]

DUPLICATE_DEFAULT_DISTANCE = 0.35
DUPLICATE_MAX_DISTANCE = 2.0
DUPLICATE_NEIGHBOURS = 5

DUPLICATE_SCAN_MAX = 300
"""Memories examined by the duplicate helper (a partition is bounded anyway)."""

DUPLICATE_GUIDANCE = (
    "以下是按向量距离找出的疑似重复记忆组（distance 越小越相似），只是候选：\n"
    "1. 逐组核对内容，只有确实在说同一件事（或一条完全包含另一条）才合并；\n"
    "2. 合并时保留信息最完整的一条，用 subconscious_update_memory 把它改写为融合后的完整内容"
    "（保留所有不重复的细节与时间信息，标签取并集，重要性取较高者）；\n"
    "3. 再用 subconscious_delete_memory 删除组内其余条目；\n"
    "4. 内容相近但事实不同（例如不同时间的两件事）的不要合并；\n"
    "5. 带 supersedes / superseded_by 的是同一事实的新旧版本（旧的回答“以前”的问题），不要合并。"
)


def memory_schemas() -> dict[str, FunctionDefinitionSchema]:
    """L2 memory tools on the target user's personal partition."""
    content = prop("string", "记忆内容（陈述句）", maxLength=LIMITS.content_chars)
    return {
        "subconscious_read_memory": define(
            "subconscious_read_memory",
            "按语义检索该用户的 L2 记忆。结果中的 distance 越小越相似。",
            {
                "query": prop("string", "检索内容", maxLength=LIMITS.query_chars),
                "top_k": top_k_prop(),
                "importance": importance_prop(),
                "since": date_prop("只看这天及之后（本地日期）"),
                "until": date_prop("只看这天及之前（本地日期）"),
            },
            ["query"],
        ),
        "subconscious_write_memory": define(
            "subconscious_write_memory",
            "为该用户写入一条新的 L2 记忆（例如把备忘录里的细节下放到 L2）。",
            {
                "content": content,
                "tags": tags_prop(),
                "importance": importance_prop(),
                "event_date": date_prop(EVENT_DATE_MEANING),
                "replaces": prop("string", REPLACES_MEANING),
            },
            ["content", "tags", "importance"],
        ),
        "subconscious_update_memory": define(
            "subconscious_update_memory",
            "修改该用户的一条 L2 记忆（内容、标签或重要性，至少提供一项）。合并重复记忆时用它写入融合后的内容。",
            {
                "id": memory_id_prop(),
                "content": prop("string", "新内容（完整替换）", maxLength=LIMITS.content_chars),
                "tags": tags_prop(),
                "importance": importance_prop(),
                "event_date": date_prop(EVENT_DATE_MEANING),
            },
            ["id"],
        ),
        "subconscious_delete_memory": define(
            "subconscious_delete_memory",
            "删除该用户的一条 L2 记忆。删除前确认其内容已保留在别处或确实无用。",
            {"id": memory_id_prop()},
            ["id"],
        ),
        "subconscious_list_memory": define(
            "subconscious_list_memory",
            "按写入时间列出该用户的 L2 记忆（可翻页）。",
            {
                "limit": limit_prop(),
                "offset": offset_prop(),
                "since": date_prop("只列这天及之后（本地日期）"),
                "until": date_prop("只列这天及之前（本地日期）"),
            },
            [],
        ),
        "subconscious_duplicate_helper": define(
            "subconscious_duplicate_helper",
            "找出该用户记忆中疑似重复的记忆组（按向量距离），并返回合并指导。只是候选，合并前请核对内容。",
            {
                "max_distance": prop(
                    "number",
                    "视为疑似重复的最大距离（越小越严格）",
                    minimum=0,
                    maximum=DUPLICATE_MAX_DISTANCE,
                    default=DUPLICATE_DEFAULT_DISTANCE,
                ),
            },
            [],
        ),
        "subconscious_get_memory_stats": define(
            "subconscious_get_memory_stats",
            "该用户 L2 记忆的统计概览：总数、各重要性与各标签的条数、最早与最新的记忆时间。",
            {},
            [],
        ),
    }


def find_duplicate_groups(
    records: list[MemoryRecord],
    neighbours: Mapping[str, list[MemoryRecord]],
    max_distance: float,
    *,
    calendar: OwnerCalendar,
) -> list[dict[str, Any]]:
    """Group memories linked by a neighbour within ``max_distance`` (union-find).

    ``neighbours[id]`` are the nearest memories of ``id`` with distances. A link
    also needs one to repeat the other (:func:`...ranking.repeats.repeats_memory`,
    the notion ``write_memory`` merges by): the same statement in nearly the same
    words, written in the same place (same scope and origin: a memory from a
    private chat and one from a group are never offered as one). Two memories
    about another person, another value or a plan instead of a fact are no pair
    however close. Groups are listed largest first, each with its closest pair distance.
    """
    parent = {r.id: r.id for r in records}

    def find(x: str) -> str:
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    closest: dict[frozenset[str], float] = {}
    for record in records:
        for hit in neighbours.get(record.id, []):
            if hit.id == record.id or hit.id not in parent or hit.distance is None:
                continue
            if hit.distance <= max_distance and repeats_memory(
                record, hit.content, scope=hit.scope, origin=hit.origin
            ):
                parent[find(hit.id)] = find(record.id)
                pair = frozenset((record.id, hit.id))
                closest[pair] = min(closest.get(pair, hit.distance), hit.distance)
    members: dict[str, list[MemoryRecord]] = {}
    for record in records:
        members.setdefault(find(record.id), []).append(record)
    groups: list[dict[str, Any]] = []
    for group in members.values():
        if len(group) < 2:
            continue
        ids = {r.id for r in group}
        distances = [d for pair, d in closest.items() if pair <= ids]
        groups.append(
            {
                "min_distance": round(min(distances), 4) if distances else None,
                "memories": [r.compact(calendar) for r in group],
            }
        )
    groups.sort(key=lambda g: (-len(g["memories"]), g["min_distance"] or 0.0))
    return groups


class MemoryToolset:
    """Handlers of the memory group, bound to one partition."""

    name = "memory"

    def __init__(
        self, ctx: LoopContext, memory: MemoryTools, store: MemoryStore, scope: Scope
    ) -> None:
        self.ctx = ctx
        self.memory = memory
        self.store = store
        self.scope = scope
        self.view = scope.view("user")

    def group(self) -> SimpleGroup:
        defs = memory_schemas()
        handlers = {
            "subconscious_read_memory": self.read_memory,
            "subconscious_write_memory": self.write_memory,
            "subconscious_update_memory": self.update_memory,
            "subconscious_delete_memory": self.delete_memory,
            "subconscious_list_memory": self.list_memory,
            "subconscious_duplicate_helper": self.duplicate_helper,
            "subconscious_get_memory_stats": self.get_memory_stats,
        }
        return SimpleGroup(self.name, [LoopTool(defs[n], h) for n, h in handlers.items()])

    @staticmethod
    def _user_scope(args: Mapping[str, Any]) -> dict[str, Any]:
        # The loop has no scope parameter: it always works on the personal partition.
        return {**args, "scope": "user"}

    async def read_memory(self, args: Mapping[str, Any], ctx: ToolContext) -> dict[str, Any]:
        return await self.memory.read_memory(self.scope, self._user_scope(args))

    async def write_memory(self, args: Mapping[str, Any], ctx: ToolContext) -> dict[str, Any]:
        result = await self.memory.write_memory(self.scope, self._user_scope(args))
        if result.get("ok"):
            count_action(self.ctx, "write")
        return result

    async def update_memory(self, args: Mapping[str, Any], ctx: ToolContext) -> dict[str, Any]:
        result = await self.memory.update_memory(self.scope, self._user_scope(args))
        if result.get("ok"):
            count_action(self.ctx, "update")
        return result

    async def delete_memory(self, args: Mapping[str, Any], ctx: ToolContext) -> dict[str, Any]:
        result = await self.memory.delete_memory(self.scope, self._user_scope(args))
        if result.get("ok"):
            count_action(self.ctx, "delete")
        return result

    async def list_memory(self, args: Mapping[str, Any], ctx: ToolContext) -> dict[str, Any]:
        return await self.memory.list_memory(self.scope, self._user_scope(args))

    async def _all_records(self, cap: int | None = None) -> list[MemoryRecord]:
        """The partition's memories (at most ``cap``), paged by id."""
        records: list[MemoryRecord] = []
        async for page in self.store.iter_records(self.view, with_documents=True):
            records.extend(page)
            if cap is not None and len(records) >= cap:
                return records[:cap]
        return records

    async def duplicate_helper(self, args: Mapping[str, Any], ctx: ToolContext) -> dict[str, Any]:
        async def run() -> dict[str, Any]:
            max_distance = parse_number(
                args,
                "max_distance",
                low=0.0,
                high=DUPLICATE_MAX_DISTANCE,
                default=DUPLICATE_DEFAULT_DISTANCE,
            )
            # The stored vectors, compared with each other in one batched query:
            # no embedding request, and no new-model query against old-model
            # vectors when the embedding model changed (EMBED_MISMATCH_POLICY=never).
            stored = await stored_vectors(self.store, self.view, DUPLICATE_SCAN_MAX)
            records = [record for record, _ in stored]
            total = await self.store.count(self.view)
            if len(records) < 2:
                return {
                    "ok": True,
                    "scanned": len(records),
                    "total": total,
                    "groups": [],
                    "guidance": "记忆不足两条，无需去重。",
                }
            k = min(DUPLICATE_NEIGHBOURS + 1, len(records))
            rows = await self.store.nearest(self.view, [vector for _, vector in stored], top_k=k)
            by_id = {r.id: r for r in records}
            neighbours: dict[str, list[MemoryRecord]] = {
                record.id: [
                    replace(by_id[hit], distance=round(distance, 4))
                    for hit, distance in row
                    if hit in by_id
                ]
                for record, row in zip(records, rows, strict=False)
            }
            groups = find_duplicate_groups(
                records, neighbours, max_distance, calendar=self.memory.calendar
            )
            return {
                "ok": True,
                "scanned": len(records),
                "total": total,
                "max_distance": max_distance,
                "groups": groups,
                "guidance": DUPLICATE_GUIDANCE if groups else "没有找到疑似重复的记忆。",
            }

        return await guard("subconscious_duplicate_helper", run)

    async def get_memory_stats(self, args: Mapping[str, Any], ctx: ToolContext) -> dict[str, Any]:
        async def run() -> dict[str, Any]:
            total = await self.store.count(self.view)
            records = await self._all_records()
            importance = Counter(r.importance for r in records)
            tags = Counter(tag for r in records for tag in r.tags)
            dated = sorted((r.created_at, r) for r in records if r.created_at)
            stats: dict[str, Any] = {
                "ok": True,
                "total": total,
                "limit": self.memory.memory_limit,
                "by_importance": {
                    level: importance.get(level, 0) for level in ("high", "medium", "low")
                },
                "by_tag": dict(tags.most_common(50)),
                "untagged": sum(1 for r in records if not r.tags),
            }
            if dated:
                calendar = self.memory.calendar  # the owner's zone, like every answer
                for key, (stamp, record) in (("oldest", dated[0]), ("newest", dated[-1])):
                    shown = calendar.show_stamp(stamp) or stamp
                    stats[key] = {"id": record.id, "created_at": shown}
            return stats

        return await guard("subconscious_get_memory_stats", run)
