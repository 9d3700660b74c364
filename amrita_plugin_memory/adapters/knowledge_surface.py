"""The chat LLM's ``knowledge_*`` tools in Amrita's global tool manager.

The manager refuses a second registration of a name, so they are registered
once per process (:data:`SURFACE`) and dispatch to the runner bound to it;
``enable_if`` offers them only while a bound runner is active and has its
knowledge base, so with L3 or the knowledge base off the chat model never
sees them.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Final

from amrita_core import FunctionDefinitionSchema, ToolContext
from nonebot import logger

from ..subconscious.knowledge_base import SUMMARY_MAX, TITLE_MAX
from ..subconscious.profile_store import MAX_WINDOW
from ..subconscious.runner import SubconsciousRunner
from ..subconscious.toolsets.knowledge import LIST_MAX, kid_prop, line_props, search_props
from ..subconscious.toolsets.suggestions import REASON_CHARS, SUGGESTION_BODY_MAX
from ..subconscious.types import SUGGESTION_ACTIONS
from ..tools.args import dump_result, tool_error
from ..tools.schemas import define, prop
from .events import target_from_tool_context

__all__ = [
    "SURFACE",
    "SURFACE_TOOL_NAMES",
    "SurfaceKnowledgeTools",
    "is_superuser",
    "surface_schemas",
]

SURFACE_TOOL_NAMES: Final = (
    "knowledge_list",
    "knowledge_read",
    "knowledge_search",
    "knowledge_suggest",
)


def is_superuser(user_id: str | None) -> bool:
    """Whether ``user_id`` is one of NoneBot's ``SUPERUSERS`` (read on every call).

    Like NoneBot's own ``SUPERUSER`` permission, both the bare id and the
    adapter-prefixed form (``onebot:12345``) count.
    """
    if user_id is None:
        return False
    import nonebot

    superusers = {str(u) for u in nonebot.get_driver().config.superusers}
    return user_id in superusers or f"onebot:{user_id}" in superusers


def surface_schemas() -> dict[str, FunctionDefinitionSchema]:
    """The chat LLM's knowledge tools (global ``ToolsManager``)."""
    return {
        "knowledge_list": define(
            "knowledge_list",
            "列出全局知识库的条目（ID、标题、摘要；最近更新的在前）。知识库保存可复用的经验、做法与结论。",
            {},
            [],
        ),
        "knowledge_read": define(
            "knowledge_read",
            f"读取一个知识条目的正文（带行号；长条目可用 start_line / end_line 分段读，每次最多 {MAX_WINDOW} 行）。",
            {
                "kid": kid_prop("知识条目 ID（来自 knowledge_list / knowledge_search 的结果）"),
                **line_props(),
            },
            ["kid"],
        ),
        "knowledge_search": define(
            "knowledge_search",
            "按语义检索全局知识库（distance 越小越相似），遇到可能有现成经验的问题时先查一查。",
            search_props(),
            ["query"],
        ),
        "knowledge_suggest": define(
            "knowledge_suggest",
            "向后台整理循环提交一条知识库修改建议（不会立即生效，由后台审查后决定是否采纳）。"
            "只建议可复用的经验与结论，不要提交关于某个用户的个人信息。"
            "action=create 需要 title、summary、body；update 需要 kid 和新的 title（以及要改的 summary / body）；"
            "delete 需要 kid 和该条目的 title。",
            {
                "action": prop("string", "建议的操作", enum=list(SUGGESTION_ACTIONS)),
                "kid": kid_prop("update / delete 时要修改的知识条目 ID"),
                "title": prop("string", f"标题（≤{TITLE_MAX} 字）", maxLength=TITLE_MAX),
                "summary": prop("string", f"摘要（≤{SUMMARY_MAX} 字）", maxLength=SUMMARY_MAX),
                "body": prop(
                    "string", f"正文（≤{SUGGESTION_BODY_MAX} 字）", maxLength=SUGGESTION_BODY_MAX
                ),
                "reason": prop(
                    "string", f"为什么建议这样改（≤{REASON_CHARS} 字）", maxLength=REASON_CHARS
                ),
            },
            ["action", "title", "reason"],
        ),
    }


class SurfaceKnowledgeTools:
    """``knowledge_list|read|search|suggest`` for the chat LLM.

    Registered in the global ``ToolsManager`` on the first :meth:`bind` and
    never again (the manager refuses duplicates). Each call goes to the bound
    runner's :class:`KnowledgeTools`; :meth:`enabled` (the tools' ``enable_if``)
    offers them only while that runner is active and has a knowledge base.
    """

    def __init__(self) -> None:
        self.runner: SubconsciousRunner | None = None
        self.registered = False

    def enabled(self) -> bool:
        runner = self.runner
        return runner is not None and runner.active and runner.knowledge_tools is not None

    def bind(self, runner: SubconsciousRunner) -> None:
        """Offer the tools, backed by ``runner``'s knowledge base."""
        if runner.knowledge_tools is None:
            raise ValueError("the runner has no knowledge base (enable_knowledge = false)")
        self.runner = runner
        if not self.registered:
            self._register()
            self.registered = True
        logger.info(
            f"[Subconscious] Knowledge tools offered to the chat LLM: {', '.join(SURFACE_TOOL_NAMES)}"
        )

    def unbind(self, runner: SubconsciousRunner) -> None:
        """Stop offering the tools if ``runner`` is the bound one."""
        if self.runner is runner:
            self.runner = None

    async def call(self, name: str, ctx: ToolContext) -> dict[str, Any]:
        runner = self.runner
        logic = runner.knowledge_tools if runner is not None and runner.active else None
        queue = runner.suggestions if runner is not None else None
        if logic is None:
            return tool_error("知识库当前不可用")
        args = ctx.data if isinstance(ctx.data, Mapping) else {}
        if name == "knowledge_list":
            return await logic.list_entries({"limit": LIST_MAX})
        if name == "knowledge_read":
            return await logic.read(args)
        if name == "knowledge_search":
            return await logic.search(args)
        target = target_from_tool_context(ctx)
        source = target.session if target is not None else "unknown"
        user_id = target.user_id if target is not None else None
        assert queue is not None
        return await queue.suggest(
            args, source=source, user_id=user_id, superuser=is_superuser(user_id)
        )

    def _register(self) -> None:
        from amrita_core import on_tools

        defs = surface_schemas()

        def make(name: str) -> Callable[[ToolContext], Awaitable[str]]:
            async def run(ctx: ToolContext) -> str:
                try:
                    result = await self.call(name, ctx)
                except Exception as exc:  # never raise into the chat
                    logger.opt(exception=exc).error(f"[Subconscious] {name} crashed")
                    result = tool_error(f"工具内部错误：{exc.__class__.__name__}")
                return dump_result(result)

            run.__name__ = f"tool_{name}"
            return run

        for name in SURFACE_TOOL_NAMES:
            on_tools(defs[name], custom_run=True, enable_if=self.enabled)(make(name))


SURFACE: Final = SurfaceKnowledgeTools()
"""The process-wide registration of the chat LLM's knowledge tools."""
