"""The loop's tool handlers, grouped so that more groups plug in later.

Every tool acts on **one** partition, the target user's personal memories
(``keys.user_key(target_user_id)``), through the shared store and the
surface tools' own logic (:class:`~amrita_plugin_memory.tools.MemoryTools`),
so arguments are validated and bounded exactly as for the chat LLM. The
handlers return result dicts (``{"ok": false, "error": ...}`` on any expected
failure); the runner turns them into the JSON the model reads.

A :class:`ToolGroup` is a list of :class:`LoopTool` plus an optional prompt
section. The runner registers groups in its isolated tool manager
(:meth:`SubconsciousRunner.add_tool_group`); the knowledge base and the user
profile come as further groups (:mod:`.knowledge_tools`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol

from amrita_core import FunctionDefinitionSchema, ToolContext
from nonebot import logger

from ..embed import EmbeddingError
from ..tools import (
    ToolArgError,
    caller_for_user,
    guard_tool_call,
    parse_int,
    parse_text,
    tool_error,
)
from ..vector import MemoryRecord, VectorStoreError
from . import schemas
from .consts import HISTORY_MESSAGE_CHARS, PENDING_MAX
from .nodes import message_text

if TYPE_CHECKING:
    from .runner import SubconsciousRunner
    from .types import Cycle, CycleOutcome

__all__ = [
    "DUPLICATE_GUIDANCE",
    "DUPLICATE_SCAN_MAX",
    "CycleEndListener",
    "Handler",
    "LoopTool",
    "MessageComposeError",
    "SubconsciousTools",
    "ToolGroup",
    "find_duplicate_groups",
]

Handler = Callable[[Mapping[str, Any], ToolContext], Awaitable[dict[str, Any]]]

DUPLICATE_SCAN_MAX = 300
"""Memories examined by the duplicate helper (a partition is bounded anyway)."""

DUPLICATE_GUIDANCE = (
    "以下是按向量距离找出的疑似重复记忆组（distance 越小越相似），只是候选：\n"
    "1. 逐组核对内容，只有确实在说同一件事（或一条完全包含另一条）才合并；\n"
    "2. 合并时保留信息最完整的一条，用 subconscious_update_memory 把它改写为融合后的完整内容"
    "（保留所有不重复的细节与时间信息，标签取并集，重要性取较高者）；\n"
    "3. 再用 subconscious_delete_memory 删除组内其余条目；\n"
    "4. 内容相近但事实不同（例如不同时间的两件事）的不要合并。"
)


@dataclass(frozen=True, slots=True)
class LoopTool:
    """One tool of the loop: what the model sees and what runs."""

    schema: FunctionDefinitionSchema
    handler: Handler

    @property
    def name(self) -> str:
        return self.schema.name


class ToolGroup(Protocol):
    """A set of loop tools, optionally with a section of the system prompt.

    A group may also define ``async def on_cycle_end(cycle, outcome)`` (see
    :class:`CycleEndListener`): the runner calls it once per cycle that got
    as far as building its prompt, after the cycle's outcome is known and its
    abstract saved, so a group can commit or discard what it did during the
    cycle (the knowledge group clears the suggestions it showed only on
    ``"success"``). Per-cycle data belongs in ``cycle.group_data[name]``. A
    cycle whose own task is cancelled never reaches ``on_cycle_end``.
    """

    name: str

    def tools(self) -> list[LoopTool]: ...

    async def prompt_section(self) -> str:
        """Text appended to the loop's system prompt ("" for none)."""
        ...


class CycleEndListener(Protocol):
    """The optional cycle-end hook of a :class:`ToolGroup`."""

    async def on_cycle_end(self, cycle: Cycle, outcome: CycleOutcome) -> None: ...


@dataclass(slots=True)
class _Group:
    name: str
    items: list[LoopTool]

    def tools(self) -> list[LoopTool]:
        return list(self.items)

    async def prompt_section(self) -> str:
        return ""


def _number(
    args: Mapping[str, Any], name: str, *, low: float, high: float, default: float
) -> float:
    value = args.get(name, default)
    if value is None:
        return default
    if isinstance(value, str):
        try:
            value = float(value.strip())
        except ValueError:
            raise ToolArgError(f"参数 {name} 必须是数字") from None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ToolArgError(f"参数 {name} 必须是数字")
    if not low <= float(value) <= high:
        raise ToolArgError(f"参数 {name} 必须在 {low} 到 {high} 之间（收到 {value}）")
    return float(value)


async def _guard(name: str, call: Callable[[], Awaitable[dict[str, Any]]]) -> dict[str, Any]:
    return await guard_tool_call("[Subconscious]", name, call)


def find_duplicate_groups(
    records: list[MemoryRecord], neighbours: Mapping[str, list[MemoryRecord]], max_distance: float
) -> list[dict[str, Any]]:
    """Group memories linked by a neighbour within ``max_distance`` (union-find).

    ``neighbours[id]`` are the nearest memories of ``id`` with distances.
    Groups are listed largest first, each with its closest pair distance.
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
            if hit.distance <= max_distance:
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
                "memories": [r.compact() for r in group],
            }
        )
    groups.sort(key=lambda g: (-len(g["memories"]), g["min_distance"] or 0.0))
    return groups


class MessageComposeError(RuntimeError):
    """The message for the user could not be generated; the text goes to the model."""


class SubconsciousTools:
    """The handlers of the loop's tools, bound to one runner (and so one target user)."""

    def __init__(self, runner: SubconsciousRunner) -> None:
        self.runner = runner
        self.runtime = runner.runtime
        self.store = runner.runtime.store
        self.memory = runner.runtime.tools
        self.caller = caller_for_user(runner.target)
        self.partition = runner.target.user

    # -- groups ------------------------------------------------------------

    def groups(self) -> list[ToolGroup]:
        """The tool groups of this issue: memory, memo, review, messages."""
        memory = schemas.memory_schemas()
        memo = schemas.memo_schemas(self.runtime.memo.max_chars)
        review = schemas.review_schemas()
        can_send = self.runner.config.allow_send_to_user
        messages = schemas.message_schemas(can_send=can_send)
        message_items = [LoopTool(messages["subconscious_iter_stop"], self.iter_stop)]
        if can_send:
            message_items.append(LoopTool(messages["subconscious_send_to_user"], self.send_to_user))
        else:
            message_items.append(
                LoopTool(messages["subconscious_note_for_user"], self.note_for_user)
            )
        return [
            _Group(
                "memory",
                [
                    LoopTool(memory["subconscious_read_memory"], self.read_memory),
                    LoopTool(memory["subconscious_write_memory"], self.write_memory),
                    LoopTool(memory["subconscious_update_memory"], self.update_memory),
                    LoopTool(memory["subconscious_delete_memory"], self.delete_memory),
                    LoopTool(memory["subconscious_list_memory"], self.list_memory),
                    LoopTool(memory["subconscious_duplicate_helper"], self.duplicate_helper),
                    LoopTool(memory["subconscious_get_memory_stats"], self.get_memory_stats),
                ],
            ),
            _Group(
                "memo",
                [
                    LoopTool(memo["subconscious_read_memo"], self.read_memo),
                    LoopTool(memo["subconscious_update_memo"], self.update_memo),
                ],
            ),
            _Group(
                "review",
                [
                    LoopTool(review["subconscious_read_chat_context"], self.read_chat_context),
                    LoopTool(review["subconscious_read_sessions"], self.read_sessions),
                ],
            ),
            _Group("messages", message_items),
        ]

    def _count(self, action: str) -> None:
        cycle = self.runner.current_cycle
        if cycle is not None:
            cycle.actions[action] += 1

    @staticmethod
    def _user_scope(args: Mapping[str, Any]) -> dict[str, Any]:
        # The loop has no scope parameter: it always works on the personal partition.
        return {**args, "scope": "user"}

    # -- L2 memory (delegated to the surface tools' logic) ------------------------

    async def read_memory(self, args: Mapping[str, Any], ctx: ToolContext) -> dict[str, Any]:
        return await self.memory.read_memory(self.caller, self._user_scope(args))

    async def write_memory(self, args: Mapping[str, Any], ctx: ToolContext) -> dict[str, Any]:
        result = await self.memory.write_memory(self.caller, self._user_scope(args))
        if result.get("ok"):
            self._count("write")
        return result

    async def update_memory(self, args: Mapping[str, Any], ctx: ToolContext) -> dict[str, Any]:
        result = await self.memory.update_memory(self.caller, self._user_scope(args))
        if result.get("ok"):
            self._count("update")
        return result

    async def delete_memory(self, args: Mapping[str, Any], ctx: ToolContext) -> dict[str, Any]:
        result = await self.memory.delete_memory(self.caller, self._user_scope(args))
        if result.get("ok"):
            self._count("delete")
        return result

    async def list_memory(self, args: Mapping[str, Any], ctx: ToolContext) -> dict[str, Any]:
        return await self.memory.list_memory(self.caller, self._user_scope(args))

    async def _all_records(self, cap: int) -> list[MemoryRecord]:
        records: list[MemoryRecord] = []
        while len(records) < cap:
            page = await self.store.list(
                self.partition, limit=min(100, cap - len(records)), offset=len(records)
            )
            if not page:
                break
            records.extend(page)
        return records

    async def duplicate_helper(self, args: Mapping[str, Any], ctx: ToolContext) -> dict[str, Any]:
        async def run() -> dict[str, Any]:
            max_distance = _number(
                args,
                "max_distance",
                low=0.0,
                high=schemas.DUPLICATE_MAX_DISTANCE,
                default=schemas.DUPLICATE_DEFAULT_DISTANCE,
            )
            records = await self._all_records(DUPLICATE_SCAN_MAX)
            total = await self.store.count(self.partition)
            if len(records) < 2:
                return {
                    "ok": True,
                    "scanned": len(records),
                    "total": total,
                    "groups": [],
                    "guidance": "记忆不足两条，无需去重。",
                }
            vectors = await self.store.embedder.embed([r.content for r in records])
            neighbours: dict[str, list[MemoryRecord]] = {}
            k = min(schemas.DUPLICATE_NEIGHBOURS + 1, len(records))
            for record, vector in zip(records, vectors, strict=True):
                neighbours[record.id] = await self.store.query_vector(
                    self.partition, vector, top_k=k
                )
            groups = find_duplicate_groups(records, neighbours, max_distance)
            return {
                "ok": True,
                "scanned": len(records),
                "total": total,
                "max_distance": max_distance,
                "groups": groups,
                "guidance": DUPLICATE_GUIDANCE if groups else "没有找到疑似重复的记忆。",
            }

        return await _guard("subconscious_duplicate_helper", run)

    async def get_memory_stats(self, args: Mapping[str, Any], ctx: ToolContext) -> dict[str, Any]:
        async def run() -> dict[str, Any]:
            total = await self.store.count(self.partition)
            records = await self._all_records(max(total, 1))
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
                stats["oldest"] = {"id": dated[0][1].id, "created_at": dated[0][0]}
                stats["newest"] = {"id": dated[-1][1].id, "created_at": dated[-1][0]}
            return stats

        return await _guard("subconscious_get_memory_stats", run)

    # -- L1 memo -------------------------------------------------------------------

    async def read_memo(self, args: Mapping[str, Any], ctx: ToolContext) -> dict[str, Any]:
        memo = await self.runtime.memo.get(self.caller.target.session)
        return {
            "ok": True,
            "content": memo,
            "chars": len(memo),
            "limit": self.runtime.memo.max_chars,
        }

    async def update_memo(self, args: Mapping[str, Any], ctx: ToolContext) -> dict[str, Any]:
        result = await self.memory.update_memo(self.caller, args)
        if result.get("ok"):
            self._count("memo")
        return result

    # -- what the user said ----------------------------------------------------------

    async def read_chat_context(self, args: Mapping[str, Any], ctx: ToolContext) -> dict[str, Any]:
        async def run() -> dict[str, Any]:
            limit = parse_int(
                args,
                "limit",
                low=1,
                high=schemas.CHAT_CONTEXT_MAX,
                default=schemas.CHAT_CONTEXT_DEFAULT,
            )
            memory = await self.runner.read_chat_memory()
            lines: list[dict[str, str]] = []
            for message in memory.messages:
                role = getattr(message, "role", None)
                text = message_text(message).strip()
                if role in ("user", "assistant") and text:
                    lines.append({"role": role, "text": _cut(text, HISTORY_MESSAGE_CHARS)})
            result: dict[str, Any] = {"ok": True, "total": len(lines), "messages": lines[-limit:]}
            if memory.abstract:
                result["earlier_summary"] = memory.abstract
            return result

        return await _guard("subconscious_read_chat_context", run)

    async def read_sessions(self, args: Mapping[str, Any], ctx: ToolContext) -> dict[str, Any]:
        async def run() -> dict[str, Any]:
            limit = parse_int(
                args, "limit", low=1, high=schemas.SESSIONS_MAX, default=schemas.SESSIONS_DEFAULT
            )
            offset = parse_int(args, "offset", low=0, high=100_000, default=0)
            sessions = sorted(
                await self.runner.read_archived_sessions(), key=lambda s: s.created_at, reverse=True
            )
            page = sessions[offset : offset + limit]
            out = []
            for session in page:
                summary = await self.runner.summarize_session(
                    session, config=ctx.ctx.config, preset=ctx.ctx.preset, usage=ctx.ctx.usage
                )
                out.append(
                    {
                        "id": session.id,
                        "created_at": datetime.fromtimestamp(session.created_at)
                        .astimezone()
                        .isoformat(timespec="seconds"),
                        "messages": len(session.data.messages),
                        "summary": summary,
                    }
                )
            return {"ok": True, "total": len(sessions), "offset": offset, "sessions": out}

        return await _guard("subconscious_read_sessions", run)

    # -- ending the cycle, talking to the user -------------------------------------------

    async def iter_stop(self, args: Mapping[str, Any], ctx: ToolContext) -> dict[str, Any]:
        async def run() -> dict[str, Any]:
            summary = parse_text(args, "summary", max_chars=schemas.SUMMARY_CHARS)
            cycle = self.runner.current_cycle
            if cycle is not None:
                cycle.stop_requested = True
                cycle.stop_summary = summary
            return {"ok": True, "message": "本轮整理已结束"}

        return await _guard("subconscious_iter_stop", run)

    async def note_for_user(self, args: Mapping[str, Any], ctx: ToolContext) -> dict[str, Any]:
        async def run() -> dict[str, Any]:
            intent = parse_text(args, "intent", max_chars=schemas.INTENT_CHARS)
            added = await self.runner.pending.add(intent)
            if added is None:
                return tool_error(
                    f"待转达的消息已达上限（{PENDING_MAX} 条）或已有相同内容，本次未记录"
                )
            self._count("note")
            return {
                "ok": True,
                "queued": True,
                "pending": len(self.runner.state["pending_messages"]),
                "message": "已记下，会在用户下一次私聊时转达",
            }

        return await _guard("subconscious_note_for_user", run)

    async def _memory_context(self, intent: str) -> str:
        try:
            hits = await self.store.query(self.partition, intent, top_k=5)
        except (EmbeddingError, VectorStoreError) as exc:
            logger.warning(f"[Subconscious] send_to_user 检索相关记忆失败：{exc}")
            return "（相关记忆暂不可用）"
        return "\n".join(f"- {h.content}" for h in hits) or "（没有相关记忆）"

    async def send_to_user(self, args: Mapping[str, Any], ctx: ToolContext) -> dict[str, Any]:
        async def run() -> dict[str, Any]:
            intent = parse_text(args, "intent", max_chars=schemas.INTENT_CHARS)
            cycle = self.runner.current_cycle
            if cycle is not None and cycle.sends >= 1:
                return tool_error("本轮已经主动发送过一条消息，不要再打扰用户")
            if cycle is not None:
                cycle.sends += 1
            try:
                text = await self.runner.compose_message(
                    intent,
                    await self._memory_context(intent),
                    config=ctx.ctx.config,
                    preset=ctx.ctx.preset,
                    usage=ctx.ctx.usage,
                )
            except MessageComposeError as exc:
                text, reason = None, str(exc)
            else:
                delivered, reason = await self.runner.send_private(text)
                if delivered:
                    self._count("send")
                    return {"ok": True, "delivered": True, "text": text}
            added = await self.runner.pending.add(intent, text=text)
            if added is not None:
                self._count("note")
            return {
                "ok": True,
                "delivered": False,
                "queued": added is not None,
                "reason": reason,
                "message": (
                    "未能发送，已改为在用户下一次私聊时转达"
                    if added is not None
                    else "未能发送，且待转达队列已满或已有相同内容"
                ),
            }

        return await _guard("subconscious_send_to_user", run)


def _cut(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"
