"""L2 surface tools (and ``update_memo``) for the chat LLM.

:class:`MemoryTools` holds the logic as plain async methods that take a
:class:`Caller` (who is asking, where) and the raw argument dict the model
sent, and return a result dict. Every argument is treated as hostile: wrong
types, unknown enum values, empty or oversized text and foreign ids produce
``{"ok": false, "error": ...}`` and change nothing.

:func:`register_surface_tools` is the thin framework glue that exposes them
to Amrita's global tool manager.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

from amrita_core import FunctionDefinitionSchema, FunctionParametersSchema, FunctionPropertySchema
from nonebot import logger

from .embed import EmbeddingError
from .keys import ChatTarget, target_from_event
from .memo import MemoService
from .vector import (
    IMPORTANCE_LEVELS,
    SCOPES,
    DimensionMismatch,
    MemoryLimitReached,
    MemoryStore,
    VectorStoreError,
)

__all__ = [
    "LIMITS",
    "Caller",
    "MemoryTools",
    "ToolArgError",
    "dump_result",
    "register_surface_tools",
]


@dataclass(frozen=True, slots=True)
class Limits:
    """Bounds on tool arguments (documented in the README)."""

    content_chars: int = 2000
    query_chars: int = 500
    tags: int = 10
    tag_chars: int = 32
    top_k_max: int = 20
    top_k_default: int = 5
    list_max: int = 50
    list_default: int = 20
    id_chars: int = 64


LIMITS = Limits()


class ToolArgError(ValueError):
    """A tool argument is unusable; the message goes back to the model."""


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


# ---------------------------------------------------------------------------
# Argument parsing
# ---------------------------------------------------------------------------


def parse_optional_text(
    args: Mapping[str, Any], name: str, *, max_chars: int, blank_is_absent: bool = False
) -> str | None:
    """A stripped, bounded, non-empty string, or ``None`` when the argument is absent.

    ``blank_is_absent`` treats ``""`` like a missing argument (for optional
    fields models tend to send empty), instead of refusing it.
    """
    value = args.get(name)
    if value is None:
        return None
    if not isinstance(value, str):
        raise ToolArgError(f"参数 {name} 必须是字符串")
    value = value.strip()
    if not value:
        if blank_is_absent:
            return None
        raise ToolArgError(f"参数 {name} 不能为空")
    if len(value) > max_chars:
        raise ToolArgError(
            f"参数 {name} 过长（{len(value)} 字，上限 {max_chars} 字），请精简后重试"
        )
    return value


def parse_text(args: Mapping[str, Any], name: str, *, max_chars: int) -> str:
    """A required, stripped, bounded, non-empty string."""
    value = parse_optional_text(args, name, max_chars=max_chars)
    if value is None:
        raise ToolArgError(f"缺少参数 {name}")
    return value


def _enum(
    args: Mapping[str, Any], name: str, allowed: tuple[str, ...], default: str | None
) -> str | None:
    value = args.get(name, default)
    if value is None or (value == "" and default is None):
        return default
    if not isinstance(value, str) or value.strip().lower() not in allowed:
        raise ToolArgError(f"参数 {name} 的值 {value!r} 无效，允许的取值：{', '.join(allowed)}")
    return value.strip().lower()


def parse_int(args: Mapping[str, Any], name: str, *, low: int, high: int, default: int) -> int:
    value = args.get(name, default)
    if value is None:
        return default
    if isinstance(value, bool):
        raise ToolArgError(f"参数 {name} 必须是整数")
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        value = int(value.strip())
    if not isinstance(value, int):
        raise ToolArgError(f"参数 {name} 必须是整数")
    if not low <= value <= high:
        raise ToolArgError(f"参数 {name} 必须在 {low} 到 {high} 之间（收到 {value}）")
    return value


def _tags(args: Mapping[str, Any], *, required: bool = False) -> list[str] | None:
    value = args.get("tags")
    if value is None:
        return [] if required else None
    if isinstance(value, str):
        # Models often send "a, b" instead of ["a", "b"].
        value = value.replace("，", ",").split(",")
    if not isinstance(value, list) or not all(isinstance(t, str) for t in value):
        raise ToolArgError("参数 tags 必须是字符串数组")
    tags: list[str] = []
    for tag in value:
        tag = tag.strip()
        if not tag or tag in tags:
            continue
        if len(tag) > LIMITS.tag_chars:
            raise ToolArgError(f"标签 {tag[:20]!r}… 过长（上限 {LIMITS.tag_chars} 字）")
        tags.append(tag)
    if len(tags) > LIMITS.tags:
        raise ToolArgError(f"标签过多（{len(tags)} 个，上限 {LIMITS.tags} 个）")
    return tags


def _memory_id(args: Mapping[str, Any]) -> str:
    value = args.get("id")
    if isinstance(value, int) and not isinstance(value, bool):
        value = str(value)
    return parse_text({"id": value}, "id", max_chars=LIMITS.id_chars)


async def guard_tool_call(
    prefix: str,
    name: str,
    call: Callable[[], Awaitable[dict[str, Any]]],
    *,
    expected: tuple[type[Exception], ...] = (),
) -> dict[str, Any]:
    """Run a tool body, turning every expected failure into an error result.

    Shared by the surface tools and the L3 loop's tools: bad arguments
    (:class:`ToolArgError` and the caller's ``expected`` types) come back as
    they are, service failures with a clear "nothing was done" message, so no
    exception ever reaches the framework (or a traceback the chat).
    """
    try:
        return await call()
    except (ToolArgError, MemoryLimitReached, *expected) as exc:
        return tool_error(str(exc))
    except EmbeddingError as exc:
        logger.warning(f"{prefix} {name} 失败：嵌入服务错误：{exc}")
        return tool_error(f"嵌入服务不可用，本次操作未执行：{exc}")
    except DimensionMismatch as exc:
        logger.warning(f"{prefix} {name} 失败：{exc}")
        return tool_error(f"嵌入服务返回的向量与记忆库不匹配，本次操作未执行：{exc}")
    except VectorStoreError as exc:
        logger.warning(f"{prefix} {name} 失败：{exc}")
        return tool_error(f"向量数据库不可用，本次操作未执行：{exc}")
    except OSError as exc:
        logger.warning(f"{prefix} {name} 失败：文件读写错误：{exc}")
        return tool_error(f"文件读写失败，本次操作未执行：{exc.__class__.__name__}")


def dump_result(result: Mapping[str, Any]) -> str:
    """Compact JSON, cheap for a model to read."""
    return json.dumps(result, ensure_ascii=False, separators=(",", ":"))


def tool_error(message: str) -> dict[str, Any]:
    """The result of a tool call that did nothing."""
    return {"ok": False, "error": message}


# ---------------------------------------------------------------------------
# Tool logic
# ---------------------------------------------------------------------------


class MemoryTools:
    """The logic behind the surface tools, callable without a running bot."""

    def __init__(self, store: MemoryStore, memo: MemoService, *, memory_limit: int) -> None:
        self.store = store
        self.memo = memo
        self.memory_limit = memory_limit

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

    async def _guard(
        self, name: str, call: Callable[[], Awaitable[dict[str, Any]]]
    ) -> dict[str, Any]:
        return await guard_tool_call("[Memory]", name, call)

    # -- L2 ------------------------------------------------------------------

    async def write_memory(self, caller: Caller, args: Mapping[str, Any]) -> dict[str, Any]:
        async def run() -> dict[str, Any]:
            content = parse_text(args, "content", max_chars=LIMITS.content_chars)
            tags = _tags(args, required=True)
            importance = _enum(args, "importance", IMPORTANCE_LEVELS, "medium")
            scope = _enum(args, "scope", SCOPES, "user")
            assert content is not None and tags is not None and importance and scope
            partition = self.partition_for(caller, scope)
            record = await self.store.add(
                partition, scope, content, tags=tags, importance=importance, limit=self.memory_limit
            )
            logger.info(f"[Memory] write_memory partition={partition} id={record.id}")
            return {"ok": True, "memory": record.compact()}

        return await self._guard("write_memory", run)

    async def read_memory(self, caller: Caller, args: Mapping[str, Any]) -> dict[str, Any]:
        async def run() -> dict[str, Any]:
            query = parse_text(args, "query", max_chars=LIMITS.query_chars)
            top_k = parse_int(
                args, "top_k", low=1, high=LIMITS.top_k_max, default=LIMITS.top_k_default
            )
            importance = _enum(args, "importance", IMPORTANCE_LEVELS, None)
            scope = _enum(args, "scope", SCOPES, "user")
            assert query is not None and scope
            partition = self.partition_for(caller, scope)
            hits = await self.store.query(partition, query, top_k=top_k, importance=importance)
            return {"ok": True, "scope": scope, "memories": [h.compact() for h in hits]}

        return await self._guard("read_memory", run)

    async def update_memory(self, caller: Caller, args: Mapping[str, Any]) -> dict[str, Any]:
        async def run() -> dict[str, Any]:
            memory_id = _memory_id(args)
            scope = _enum(args, "scope", SCOPES, "user")
            content = parse_optional_text(args, "content", max_chars=LIMITS.content_chars)
            tags = _tags(args)
            importance = _enum(args, "importance", IMPORTANCE_LEVELS, None)
            assert scope
            if content is None and tags is None and importance is None:
                raise ToolArgError("至少提供 content、tags、importance 之一")
            partition = self.partition_for(caller, scope)
            await self._require_manager(caller, scope, "修改")
            record = await self.store.update(
                partition, memory_id, content=content, tags=tags, importance=importance
            )
            if record is None:
                raise ToolArgError(f"记忆 {memory_id} 不存在（或不属于 scope={scope} 的当前分区）")
            logger.info(f"[Memory] update_memory partition={partition} id={memory_id}")
            return {"ok": True, "memory": record.compact()}

        return await self._guard("update_memory", run)

    async def delete_memory(self, caller: Caller, args: Mapping[str, Any]) -> dict[str, Any]:
        async def run() -> dict[str, Any]:
            memory_id = _memory_id(args)
            scope = _enum(args, "scope", SCOPES, "user")
            assert scope
            partition = self.partition_for(caller, scope)
            await self._require_manager(caller, scope, "删除")
            if not await self.store.delete(partition, memory_id):
                raise ToolArgError(f"记忆 {memory_id} 不存在（或不属于 scope={scope} 的当前分区）")
            logger.info(f"[Memory] delete_memory partition={partition} id={memory_id}")
            return {"ok": True, "deleted": memory_id}

        return await self._guard("delete_memory", run)

    async def list_memory(self, caller: Caller, args: Mapping[str, Any]) -> dict[str, Any]:
        async def run() -> dict[str, Any]:
            limit = parse_int(
                args, "limit", low=1, high=LIMITS.list_max, default=LIMITS.list_default
            )
            offset = parse_int(args, "offset", low=0, high=1_000_000, default=0)
            scope = _enum(args, "scope", SCOPES, "user")
            assert scope
            partition = self.partition_for(caller, scope)
            records = await self.store.list(partition, limit=limit, offset=offset)
            total = await self.store.count(partition)
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


# ---------------------------------------------------------------------------
# Schemas and registration (framework glue)
# ---------------------------------------------------------------------------


def prop(type_: str, description: str, **kw: Any) -> FunctionPropertySchema:
    """One parameter of a tool schema."""
    return FunctionPropertySchema(type=type_, description=description, **kw)  # type: ignore[arg-type]


def define(
    name: str, description: str, props: dict[str, FunctionPropertySchema], required: list[str]
) -> FunctionDefinitionSchema:
    """A tool schema (surface tools and the L3 loop's tools alike)."""
    return FunctionDefinitionSchema(
        name=name,
        description=description,
        parameters=FunctionParametersSchema(type="object", properties=props, required=required),
    )


def importance_prop() -> FunctionPropertySchema:
    return prop("string", "重要性", enum=list(IMPORTANCE_LEVELS))


def tags_prop() -> FunctionPropertySchema:
    return prop(
        "array",
        f"标签（最多 {LIMITS.tags} 个，每个不超过 {LIMITS.tag_chars} 字）",
        items=prop("string", "标签", maxLength=LIMITS.tag_chars),
        maxItems=LIMITS.tags,
    )


def memory_id_prop() -> FunctionPropertySchema:
    return prop("string", "记忆 ID（来自检索或列出记忆的结果）", maxLength=LIMITS.id_chars)


def top_k_prop() -> FunctionPropertySchema:
    return prop(
        "integer", "返回条数", minimum=1, maximum=LIMITS.top_k_max, default=LIMITS.top_k_default
    )


def limit_prop() -> FunctionPropertySchema:
    return prop("integer", "条数", minimum=1, maximum=LIMITS.list_max, default=LIMITS.list_default)


def offset_prop() -> FunctionPropertySchema:
    return prop("integer", "跳过的条数（翻页）", minimum=0, default=0)


def _schemas() -> dict[str, FunctionDefinitionSchema]:
    scope = prop(
        "string",
        "记忆范围：user=说话人个人记忆（私聊群聊互通）；group=本群共享记忆（仅群聊可用）",
        enum=list(SCOPES),
    )
    importance = importance_prop()
    tags = tags_prop()
    memory_id = memory_id_prop()

    return {
        "write_memory": define(
            "write_memory",
            "把一条值得长期记住的事实写入 L2 向量记忆（具体事件、长尾偏好、项目细节等）。"
            "每轮都需要的身份/稳定偏好请用 update_memo。",
            {
                "content": prop("string", "记忆内容（陈述句）", maxLength=LIMITS.content_chars),
                "tags": tags,
                "importance": importance,
                "scope": scope,
            },
            ["content", "tags", "importance", "scope"],
        ),
        "read_memory": define(
            "read_memory",
            "按语义检索 L2 记忆。结果中的 distance 越小越相似。",
            {
                "query": prop("string", "检索内容", maxLength=LIMITS.query_chars),
                "top_k": top_k_prop(),
                "importance": importance,
                "scope": scope,
            },
            ["query", "scope"],
        ),
        "update_memory": define(
            "update_memory",
            "修改一条 L2 记忆（内容、标签或重要性）。修改群共享记忆需要管理员权限。",
            {
                "id": memory_id,
                "scope": scope,
                "content": prop("string", "新内容", maxLength=LIMITS.content_chars),
                "tags": tags,
                "importance": importance,
            },
            ["id", "scope"],
        ),
        "delete_memory": define(
            "delete_memory",
            "删除一条 L2 记忆。删除群共享记忆需要管理员权限。",
            {"id": memory_id, "scope": scope},
            ["id", "scope"],
        ),
        "list_memory": define(
            "list_memory",
            "列出 L2 记忆（按写入时间）。",
            {
                "limit": limit_prop(),
                "offset": offset_prop(),
                "scope": scope,
            },
            ["limit", "scope"],
        ),
        "update_memo": define(
            "update_memo",
            "整篇替换当前会话的 L1 备忘录（私聊=该用户，群聊=本群）。先读当前备忘录，融合新事实后输出完整新全文；"
            "只写陈述性事实，按 身份 > 偏好 > 工具模式 > 近期上下文 排序；超过字数上限会被拒绝。",
            {"content": prop("string", "备忘录完整新全文")},
            ["content"],
        ),
    }


async def caller_from_event(bot: Any, event: Any) -> Caller:
    """The :class:`Caller` of a OneBot message event.

    Group management rights are Amrita's own rule (``is_group_admin``): the
    group's admin or owner, or a bot admin / superuser.
    """
    from amrita.plugins.chat.check_rule import is_group_admin
    from nonebot.adapters.onebot.v11 import GroupMessageEvent

    async def can_manage_group() -> bool:
        return isinstance(event, GroupMessageEvent) and await is_group_admin(event, bot)

    return Caller(target_from_event(event), can_manage_group)


async def caller_from_tool_context(ctx: Any) -> Caller | None:
    """The caller of a tool invoked in an Amrita chat turn; ``None`` elsewhere."""
    from amrita.plugins.chat.runtime import try_get_amrita_ctx

    chat = getattr(ctx.ctx, "chat_object", None)
    amrita_ctx = try_get_amrita_ctx(chat) if chat is not None else None
    if not amrita_ctx:
        return None
    return await caller_from_event(amrita_ctx["bot"], amrita_ctx["event"])


def register_surface_tools(tools: MemoryTools) -> list[str]:
    """Register the six surface tools in Amrita's global tool manager."""
    from amrita_core import ToolContext, on_tools

    handlers: dict[str, Callable[[Caller, Mapping[str, Any]], Awaitable[dict[str, Any]]]] = {
        "write_memory": tools.write_memory,
        "read_memory": tools.read_memory,
        "update_memory": tools.update_memory,
        "delete_memory": tools.delete_memory,
        "list_memory": tools.list_memory,
        "update_memo": tools.update_memo,
    }
    schemas = _schemas()

    def make(name: str) -> Callable[[ToolContext], Awaitable[str]]:
        handler = handlers[name]

        async def run(ctx: ToolContext) -> str:
            caller = await caller_from_tool_context(ctx)
            if caller is None:
                return dump_result(tool_error("该工具只能在聊天会话中使用"))
            args = ctx.data if isinstance(ctx.data, Mapping) else {}
            return dump_result(await handler(caller, args))

        run.__name__ = f"tool_{name}"
        return run

    for name in handlers:
        on_tools(schemas[name], custom_run=True)(make(name))
    return list(handlers)
