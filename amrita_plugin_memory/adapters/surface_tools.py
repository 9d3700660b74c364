"""The six memory tools in Amrita's global tool manager, and who calls them."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from ..storage.scope import Scope
from ..tools.args import dump_result, tool_error
from ..tools.memory_tools import MemoryTools
from ..tools.schemas import surface_schemas
from .events import RulesOf, scope_from_tool_context

__all__ = ["register_surface_tools"]


def register_surface_tools(tools: MemoryTools, rules: RulesOf) -> list[str]:
    """Register the six surface tools in Amrita's global tool manager; each call's
    :class:`Scope` is decided with the current ``rules()``."""
    from amrita_core import ToolContext, on_tools

    handlers: dict[str, Callable[[Scope, Mapping[str, Any]], Awaitable[dict[str, Any]]]] = {
        "write_memory": tools.write_memory,
        "read_memory": tools.read_memory,
        "update_memory": tools.update_memory,
        "delete_memory": tools.delete_memory,
        "list_memory": tools.list_memory,
        "update_memo": tools.update_memo,
    }
    schemas = surface_schemas()

    def make(name: str) -> Callable[[ToolContext], Awaitable[str]]:
        handler = handlers[name]

        async def run(ctx: ToolContext) -> str:
            scope = await scope_from_tool_context(ctx, rules())
            if scope is None:
                return dump_result(tool_error("该工具只能在聊天会话中使用"))
            args = ctx.data if isinstance(ctx.data, Mapping) else {}
            return dump_result(await handler(scope, args))

        run.__name__ = f"tool_{name}"
        return run

    for name in handlers:
        on_tools(schemas[name], custom_run=True)(make(name))
    return list(handlers)
