"""Function schemas: the building blocks, and the chat LLM's memory tools."""

from __future__ import annotations

from typing import Any

from amrita_core import FunctionDefinitionSchema, FunctionParametersSchema, FunctionPropertySchema

from ..core.records import IMPORTANCE_LEVELS, SCOPES
from .args import LIMITS

__all__ = [
    "define",
    "importance_prop",
    "limit_prop",
    "memory_id_prop",
    "offset_prop",
    "prop",
    "surface_schemas",
    "tags_prop",
    "top_k_prop",
]


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


def surface_schemas() -> dict[str, FunctionDefinitionSchema]:
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
