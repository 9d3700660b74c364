"""What an L3 cycle costs, and whether today's ``[budget]`` lets one start.

A cycle is one ``ChatObject`` run: every model request it makes (the ReAct
rounds, a history summary, a composed message) is recorded by amrita-core in
the run's usage proxy (``Cycle.usage``). After the cycle those records go into
the usage ledger as ``subconscious`` requests of the target user, and their
total into Amrita's global statistics as before (:meth:`.amrita_data.AmritaData.add_usage`).

Before a cycle the budget is asked: when a cap holds the target user (or the
whole bot) back, no cycle starts and the next one is planned for the local
midnight when the cap is lifted. A cycle already running is not stopped by a
cap: it ends within ``max_iterations`` rounds.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from nonebot import logger

from ..storage.scope import UserView
from ..storage.usage import BackgroundBudget, Spend
from .scheduling import RunPlanner
from .types import CycleResult

__all__ = ["budget_gate", "cycle_spend", "record_spend", "tokens_text"]

FEATURE = "subconscious"


def tokens_text(usage: Any) -> str:
    """``prompt/completion`` tokens of a run's total usage, for the cycle's log line."""
    if usage is None:
        return "0/0"
    return f"{usage.prompt_tokens}/{usage.completion_tokens}"


def cycle_spend(records: Iterable[Any]) -> Spend:
    """The ledger's figures of a run's billing records (amrita-core's ``BillingRecord``)."""
    total = Spend()
    for record in records:
        prompt = int(record.prompt_tokens or 0)
        cached = min(int(getattr(record, "cache_hit", None) or 0), prompt)
        total = total + Spend(1, prompt, int(record.completion_tokens or 0), cached)
    return total


async def record_spend(budget: BackgroundBudget, target: str, proxy: Any) -> None:
    """Put a finished run's requests into the ledger (nothing when it made none)."""
    spend = cycle_spend(proxy.records if proxy is not None else [])
    if spend.requests:
        await budget.spent(FEATURE, target, spend)


async def budget_gate(
    budget: BackgroundBudget, planner: RunPlanner, target: UserView
) -> CycleResult | None:
    """``None`` when a cycle may start; else the skipped result, the next run planned
    (``target``: the loop's user, whose budget pays)."""
    admission = await budget.admit(FEATURE, target)
    if admission.allowed or admission.until is None:
        return None
    who = "全局" if admission.cap == "bot" else f"用户 {target.user_id} 的"
    try:
        planner.plan_at(admission.until)
    except Exception as exc:  # no scheduler (shutdown): the next message plans one
        logger.debug(f"[Subconscious] plan the run after the budget wait: {exc}")
    logger.info(
        f"[Subconscious] 今天{who}后台 token 已达 [budget] 上限，本轮不运行，"
        f"推迟到 {admission.until:%Y-%m-%d %H:%M}（聊天不受影响）"
    )
    return CycleResult(0, "skipped", error="budget")
