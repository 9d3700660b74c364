"""The chat tools of :class:`MemoryTools` in Amrita's global tool manager, and who calls them.

Every method marked with :func:`~..tools.surface.surface_tool` is registered;
nothing here names a tool.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Mapping

from ..storage.usage import UsageLedger
from ..tools.args import dump_result, tool_error
from ..tools.memory_tools import MemoryTools
from ..tools.surface import BoundTool, declared_tools
from .events import RulesOf, scope_from_tool_context

__all__ = ["register_surface_tools"]


def schema_chars(declared: list[BoundTool]) -> Callable[[], int]:
    """How many characters the tools offered now add to a chat request: each entry of the
    request's ``tools`` as compact JSON with only the fields set, as the OpenAI client
    sends it (measured once; a switched tool counts while it is offered)."""
    from amrita_core.tools.models import ToolFunctionSchema

    def size(tool: BoundTool) -> int:
        entry = ToolFunctionSchema(function=tool.schema, type="function")
        dumped = entry.model_dump(exclude_unset=True)
        return len(json.dumps(dumped, ensure_ascii=False, separators=(",", ":")))

    sizes = [(tool, size(tool)) for tool in declared]
    return lambda: sum(size for tool, size in sizes if tool.enabled())


def register_surface_tools(
    tools: MemoryTools, rules: RulesOf, usage: UsageLedger | None = None
) -> list[str]:
    """Register every declared chat tool of ``tools``; each call's scope is decided with the
    current ``rules()``, and a tool with a switch is offered only while it is on. ``usage``
    learns how many characters the tools add to a turn."""
    from amrita_core import ToolContext, ToolsManager
    from amrita_core.tools.models import ToolData, ToolFunctionSchema

    def make(tool: BoundTool) -> Callable[[ToolContext], Awaitable[str]]:
        async def run(ctx: ToolContext) -> str:
            scope = await scope_from_tool_context(ctx, rules())
            if scope is None:
                return dump_result(tool_error("该工具只能在聊天会话中使用"))
            args = ctx.data if isinstance(ctx.data, Mapping) else {}
            return dump_result(await tool.handler(scope, args))

        run.__name__ = f"tool_{tool.name}"
        return run

    declared = declared_tools(tools)
    if usage is not None:
        usage.tools_chars = schema_chars(declared)
    manager = ToolsManager()
    for tool in declared:
        # As ``on_tools`` does, without setting ``strict``: the SDK sends only the fields
        # that were set, and ``"strict": false`` (the default) is 15 characters in every
        # request of every turn.
        manager.register_tool(
            ToolData(
                data=ToolFunctionSchema(function=tool.schema, type="function"),
                func=make(tool),
                custom_run=True,
                enable_if=tool.enabled,
            )
        )
    return [tool.name for tool in declared]
