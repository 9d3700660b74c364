"""The end of one cycle: its abstract kept in the state, the tool groups told the outcome."""

from __future__ import annotations

from collections.abc import Iterable

from nonebot import logger

from .context import LoopContext
from .toolsets.base import ToolGroup
from .types import AbstractEntry, Cycle, CycleOutcome, StateData

__all__ = ["end_cycle", "record_cycle"]


async def end_cycle(groups: Iterable[ToolGroup], cycle: Cycle, outcome: CycleOutcome) -> None:
    """Call ``on_cycle_end(cycle, outcome)`` of every tool group that has one.

    The extension point for groups that must commit or discard per-cycle
    work depending on how the cycle ended (see :class:`~.toolsets.base.ToolGroup`).
    A failing hook is logged and does not affect the others.
    """
    for group in groups:
        hook = getattr(group, "on_cycle_end", None)
        if hook is None:
            continue
        try:
            await hook(cycle, outcome)
        except Exception as exc:
            logger.opt(exception=exc).error(
                f"[Subconscious] Cycle #{cycle.number}: on_cycle_end of group {group.name} failed"
            )


async def record_cycle(
    ctx: LoopContext,
    cycle: Cycle,
    outcome: CycleOutcome,
    summary: str,
    *,
    max_abstracts: int,
) -> None:
    """Count the run and keep its abstract (a window of ``max_abstracts``); never raises."""
    entry: AbstractEntry = {
        "time": ctx.calendar.now().isoformat(timespec="seconds"),
        "cycle": cycle.number,
        "outcome": outcome,
        "summary": summary,
    }

    def change(state: StateData) -> None:
        state["total_runs"] = max(state["total_runs"], cycle.number)
        state["last_abstracts"] = [*state["last_abstracts"], entry][-max_abstracts:]

    try:
        await ctx.mutate_state(change, since=cycle.started_at)
    except Exception as exc:
        logger.error(f"[Subconscious] 保存循环状态失败：{exc.__class__.__name__}: {exc}")
