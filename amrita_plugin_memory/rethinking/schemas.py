"""Function schemas of the loop's tools (what the loop's model sees).

Bounds mirror the surface tools (:data:`amrita_plugin_memory.tools.LIMITS`);
the handlers validate again, so a schema is a hint to the model, never the
only guard. The loop works on one partition (the target user's personal
memories), so no tool takes a ``scope``.
"""

from __future__ import annotations

from amrita_core import FunctionDefinitionSchema

from ..tools import (
    LIMITS,
    define,
    importance_prop,
    limit_prop,
    memory_id_prop,
    offset_prop,
    prop,
    tags_prop,
    top_k_prop,
)

__all__ = [
    "DUPLICATE_DEFAULT_DISTANCE",
    "DUPLICATE_MAX_DISTANCE",
    "INTENT_CHARS",
    "SESSIONS_MAX",
    "SUMMARY_CHARS",
    "define",
    "memo_schemas",
    "memory_schemas",
    "message_schemas",
    "prop",
    "review_schemas",
]

SUMMARY_CHARS = 500
INTENT_CHARS = 500
CHAT_CONTEXT_MAX = 50
CHAT_CONTEXT_DEFAULT = 20
SESSIONS_MAX = 10
SESSIONS_DEFAULT = 3
DUPLICATE_DEFAULT_DISTANCE = 0.35
DUPLICATE_MAX_DISTANCE = 2.0
DUPLICATE_NEIGHBOURS = 5


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
            },
            ["query"],
        ),
        "subconscious_write_memory": define(
            "subconscious_write_memory",
            "为该用户写入一条新的 L2 记忆（例如把备忘录里的细节下放到 L2）。",
            {"content": content, "tags": tags_prop(), "importance": importance_prop()},
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


def memo_schemas(memo_limit: int) -> dict[str, FunctionDefinitionSchema]:
    """The target user's private L1 memo."""
    return {
        "subconscious_read_memo": define(
            "subconscious_read_memo",
            "读取该用户的 L1 备忘录全文及字数。",
            {},
            [],
        ),
        "subconscious_update_memo": define(
            "subconscious_update_memo",
            f"整篇替换该用户的 L1 备忘录（上限 {memo_limit} 字，超出会被拒绝）。先读取，融合或压缩后输出完整新全文；"
            "细节应先用 subconscious_write_memory 下放到 L2。",
            {"content": prop("string", "备忘录完整新全文")},
            ["content"],
        ),
    }


def review_schemas() -> dict[str, FunctionDefinitionSchema]:
    """Reading what the user said (recent chat and archived sessions)."""
    return {
        "subconscious_read_chat_context": define(
            "subconscious_read_chat_context",
            "读取该用户最近的私聊记录（最新的在最后）。",
            {
                "limit": prop(
                    "integer",
                    "条数",
                    minimum=1,
                    maximum=CHAT_CONTEXT_MAX,
                    default=CHAT_CONTEXT_DEFAULT,
                )
            },
            [],
        ),
        "subconscious_read_sessions": define(
            "subconscious_read_sessions",
            "读取该用户已归档的历史会话（每个会话附 LLM 生成的摘要，最新的在前）。",
            {
                "limit": prop(
                    "integer", "会话数", minimum=1, maximum=SESSIONS_MAX, default=SESSIONS_DEFAULT
                ),
                "offset": prop("integer", "跳过的会话数（翻页）", minimum=0, default=0),
            },
            [],
        ),
    }


def message_schemas(*, can_send: bool) -> dict[str, FunctionDefinitionSchema]:
    """Ending the cycle and talking to the user."""
    schemas = {
        "subconscious_iter_stop": define(
            "subconscious_iter_stop",
            "结束本轮整理。summary 用一两句话写下本轮做了什么，下一轮会看到它。",
            {"summary": prop("string", "本轮做了什么", maxLength=SUMMARY_CHARS)},
            ["summary"],
        ),
    }
    intent = prop("string", "想告诉用户什么（意图，不必是原话）", maxLength=INTENT_CHARS)
    if can_send:
        schemas["subconscious_send_to_user"] = define(
            "subconscious_send_to_user",
            "主动给该用户发一条私聊消息：根据意图与相关记忆生成角色口吻的消息并立即发送"
            "（每轮最多一次）。Bot 不在线时改为在用户下次私聊时转达。没有必要就不要打扰用户。",
            {"intent": intent},
            ["intent"],
        )
    else:
        schemas["subconscious_note_for_user"] = define(
            "subconscious_note_for_user",
            "记下想告诉该用户的话：在用户下一次私聊时由 Bot 自然地转达（不会主动发消息，也不会出现在群聊中）。"
            "没有必要就不要使用。",
            {"intent": intent},
            ["intent"],
        )
    return schemas
