"""What a tool group of the loop is: tools (schema + handler) and a prompt section."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import Any, Protocol

from amrita_core import FunctionDefinitionSchema, ToolContext, ToolData, ToolFunctionSchema
from nonebot import logger

from ...core.errors import WriteFenced
from ...tools.args import dump_result, guard_tool_call

__all__ = [
    "FENCED",
    "Gate",
    "Handler",
    "LoopTool",
    "SimpleGroup",
    "ToolGroup",
    "guard",
    "tool_data",
]

Handler = Callable[[Mapping[str, Any], ToolContext], Awaitable[dict[str, Any]]]
Gate = Callable[[], AbstractAsyncContextManager[bool]]
"""Entered around every call: yields whether the call may run (``subconscious.fence``)."""

FENCED = {
    "ok": False,
    "error": "该用户的数据刚被删除（遗忘）：本轮不再读写任何内容，请调用 subconscious_iter_stop 结束本轮",
}
"""The answer to a tool call of a cycle fenced by a forget of the target user."""


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

    A group may also define ``async def on_cycle_end(cycle, outcome)``: the
    runner calls it once per cycle that got as far as building its prompt,
    after the cycle's outcome is known and its abstract saved, so a group can
    commit or discard what it did during the cycle (the suggestions group
    clears the suggestions it showed only on ``"success"``). Per-cycle data
    belongs in ``cycle.group_data[name]``. A cycle whose own task is cancelled
    never reaches ``on_cycle_end``.
    """

    name: str

    def tools(self) -> list[LoopTool]: ...

    async def prompt_section(self) -> str:
        """Text appended to the loop's system prompt ("" for none)."""
        ...


@dataclass(slots=True)
class SimpleGroup:
    """A group without a prompt section."""

    name: str
    items: list[LoopTool]

    def tools(self) -> list[LoopTool]:
        return list(self.items)

    async def prompt_section(self) -> str:
        return ""


async def guard(name: str, call: Callable[[], Awaitable[dict[str, Any]]]) -> dict[str, Any]:
    """:func:`~...tools.args.guard_tool_call` with the loop's log prefix."""
    return await guard_tool_call("[Subconscious]", name, call)


def tool_data(tool: LoopTool, label: Callable[[], str], gate: Gate | None = None) -> ToolData:
    """``tool`` for a tool manager: never raises, logs every call with ``label()`` (the cycle),
    runs it inside ``gate()`` (refused, :data:`FENCED`, when the gate says no)."""

    async def call(args: Mapping[str, Any], ctx: ToolContext) -> dict[str, Any]:
        if gate is None:
            return await tool.handler(args, ctx)
        async with gate() as may_run:
            return await tool.handler(args, ctx) if may_run else dict(FENCED)

    async def run(ctx: ToolContext) -> str:
        where = label()
        args = ctx.data if isinstance(ctx.data, Mapping) else {}
        try:
            result = await call(args, ctx)
        except WriteFenced:  # the store's fence: the target user was forgotten meanwhile
            result = dict(FENCED)
        except Exception as exc:
            logger.opt(exception=exc).error(f"[Subconscious] {where} tool {tool.name} crashed")
            result = {"ok": False, "error": f"工具内部错误：{exc.__class__.__name__}: {exc}"}
        status = "ok" if result.get("ok") else f"error: {result.get('error')}"
        logger.info(f"[Subconscious] {where} {tool.name} → {status}")
        return dump_result(result)

    run.__name__ = f"subconscious_tool_{tool.name}"
    return ToolData(
        data=ToolFunctionSchema(function=tool.schema, type="function"), func=run, custom_run=True
    )
