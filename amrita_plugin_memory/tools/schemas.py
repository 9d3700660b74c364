"""Function schemas: the building blocks of every tool's schema (chat tools, loop tools)."""

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
    "scope_prop",
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


def scope_prop() -> FunctionPropertySchema:
    """The ``scope`` argument of the memory tools (``user`` or ``group``)."""
    return prop(
        "string",
        "记忆范围：user=说话人个人记忆（私聊群聊互通）；group=本群共享记忆（仅群聊可用）",
        enum=list(SCOPES),
    )
